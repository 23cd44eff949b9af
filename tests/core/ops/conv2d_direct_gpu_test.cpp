// Alloy's direct convolution kernels (core/ops/cuda/conv2d_direct.h), called directly, against
// the CPU convolution on the same data, in f32, f16 and bf16: LeNet's shapes (filter and
// channel counts that are not multiples of a thread's 8), a padded 1-channel stem, stride 2, a
// non-square filter with unequal padding; the forward with and without its fused bias, the
// filter gradient overwriting garbage or adding to what dw holds, every direction twice with
// equal bits, the forward also with its channels split over warp groups; and which geometries
// conv2d_direct_supports and conv2d_direct_splits take.
#include <boost/test/unit_test.hpp>
#include <string>

#include "core/ops/conv2d.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/ops/cuda/conv2d_direct.h"
#include "tests/support/conv2d_kernels.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(conv2d_direct_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

using cuda::ConvDirection;
using cuda::DirectForward;

constexpr DType kTypes[] = {DType::f32, DType::f16, DType::bf16};

Tensor direct_forward(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& w,
                      const Tensor& b, DirectForward variant = DirectForward::streaming) {
  Tensor y = nan_tensor({g.batch, g.filters, g.out_h, g.out_w}, x.dtype());
  cuda::conv2d_direct_forward(g, x.dtype(), x.raw(), w.raw(), b.defined() ? b.raw() : nullptr,
                              y.raw(), default_stream(), variant);
  return y;
}

Tensor direct_data(const cpu::Conv2dGeometry& g, const Tensor& w, const Tensor& dy) {
  Tensor dx = nan_tensor({g.batch, g.channels, g.height, g.width}, dy.dtype());
  const std::size_t bytes = cuda::conv2d_direct_data_workspace(g, dy.dtype());
  Tensor workspace = nan_workspace(bytes);
  cuda::conv2d_direct_data(g, dy.dtype(), w.raw(), dy.raw(), dx.raw(), workspace.raw(), bytes,
                           default_stream());
  return dx;
}

void direct_filter(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw,
                   bool accumulate) {
  const std::size_t bytes = cuda::conv2d_direct_filter_workspace(g);
  Tensor workspace = nan_workspace(bytes);
  cuda::conv2d_direct_filter(g, x.dtype(), x.raw(), dy.raw(), dw.raw(), accumulate, workspace.raw(),
                             bytes, default_stream());
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_with_and_without_bias_matches_the_cpu_and_repeats_bit_for_bit) {
  Generator generator(111);
  for (const DType dtype : kTypes) {
    for (const ConvCase& c : kConvCases) {
      const cpu::Conv2dGeometry g = geometry_of(c);
      BOOST_REQUIRE_MESSAGE(cuda::conv2d_direct_supports(g, dtype, ConvDirection::forward),
                            "direct forward " << describe(dtype, c) << ": not supported");
      check_forward_kernel("direct forward", c, dtype, generator,
                           [](const cpu::Conv2dGeometry& shape, const Tensor& x, const Tensor& w,
                              const Tensor& b) { return direct_forward(shape, x, w, b); });
      if (!cuda::conv2d_direct_splits(g, dtype)) continue;
      check_forward_kernel(
          "direct forward, channels split", c, dtype, generator,
          [](const cpu::Conv2dGeometry& shape, const Tensor& x, const Tensor& w, const Tensor& b) {
            return direct_forward(shape, x, w, b, DirectForward::split_channels);
          });
    }
  }
}

BOOST_AUTO_TEST_CASE(input_gradient_matches_the_cpu_and_repeats_bit_for_bit) {
  Generator generator(112);
  for (const DType dtype : kTypes) {
    for (const ConvCase& c : kConvCases) {
      if (strided(c)) continue;
      const std::string what = "direct input gradient " + describe(dtype, c);
      const cpu::Conv2dGeometry g = geometry_of(c);
      BOOST_REQUIRE_MESSAGE(cuda::conv2d_direct_supports(g, dtype, ConvDirection::data),
                            what << ": not supported");
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator, -0.2f, 0.2f);
      const Tensor dy = random_tensor(conv2d_output_shape(c.x, c.w, c.params), dtype, generator);
      Tensor dw = Tensor::zeros(c.w, DType::f32), db;
      const Tensor dx = conv2d_backward(x, w, dy, dw, db, c.params, true).dx;
      const Tensor dx_magnitude =
          conv2d_backward(abs_f32(x), abs_f32(w), abs_f32(dy), dw, db, c.params, true).dx;
      const Tensor w_gpu = to_cuda(w), dy_gpu = to_cuda(dy);

      const Tensor dx_gpu = direct_data(g, w_gpu, dy_gpu);
      check_sum(dx_gpu, dx, dx_magnitude, dtype, static_cast<double>(c.w[0] * c.w[2] * c.w[3]),
                what);
      check_gpu_equal(direct_data(g, w_gpu, dy_gpu), to_host(dx_gpu), what + ", run twice");
    }
  }
}

BOOST_AUTO_TEST_CASE(filter_gradient_overwrites_or_accumulates_and_repeats_bit_for_bit) {
  Generator generator(113);
  for (const DType dtype : kTypes) {
    for (const ConvCase& c : kConvCases) {
      BOOST_REQUIRE_MESSAGE(
          cuda::conv2d_direct_supports(geometry_of(c), dtype, ConvDirection::filter),
          "direct filter gradient " << describe(dtype, c) << ": not supported");
      check_filter_kernel("direct filter gradient", c, dtype, generator, direct_filter);
    }
  }
}

BOOST_AUTO_TEST_CASE(supports_names_what_the_kernels_take) {
  const auto supports = [](const Shape& x, const Shape& w, const Conv2dParams& params,
                           ConvDirection direction, DType dtype = DType::f32,
                           Layout layout = Layout::nchw) {
    return cuda::conv2d_direct_supports(conv2d_geometry(x, w, params, layout), dtype, direction);
  };
  const ConvDirection directions[] = {ConvDirection::forward, ConvDirection::data,
                                      ConvDirection::filter};
  for (const DType dtype : kTypes) {
    for (const ConvCase& c : kConvCases) {
      for (const ConvDirection direction : directions) {
        if (direction == ConvDirection::data && strided(c)) continue;
        BOOST_TEST(supports(c.x, c.w, c.params, direction, dtype),
                   describe(dtype, c) << " direction " << static_cast<int>(direction));
      }
    }
  }
  const ConvCase& lenet = kConvCases[0];
  for (const ConvDirection direction : directions) {
    BOOST_TEST(!supports(lenet.x, lenet.w, lenet.params, direction, DType::f16, Layout::nhwc));
    BOOST_TEST(!supports(lenet.x, lenet.w, lenet.params, direction, DType::i32));
  }
  const Conv2dParams plain{1, 1, 0, 0};
  // The split forward: at least 4 channels, C*R*S <= 512.
  const auto splits = [](const ConvCase& c, DType dtype = DType::f32) {
    return cuda::conv2d_direct_splits(geometry_of(c), dtype);
  };
  BOOST_TEST(splits(kConvCases[1]));   // LeNet's second layer: 20 channels, 500 taps
  BOOST_TEST(splits(kConvCases[4]));   // 4 channels
  BOOST_TEST(!splits(kConvCases[3]));  // 3 channels
  BOOST_TEST(!splits(kConvCases[0]));  // 1 channel
  BOOST_TEST(!splits({{1, 20, 13, 13}, {50, 20, 5, 5}, plain}, DType::i32));
  BOOST_TEST(splits({{1, 512, 4, 4}, {4, 512, 1, 1}, plain}));
  BOOST_TEST(!splits({{1, 513, 4, 4}, {4, 513, 1, 1}, plain}));
  // The forward's and the filter gradient's filter tile: C*R*S <= 1536.
  for (const ConvDirection direction : {ConvDirection::forward, ConvDirection::filter}) {
    BOOST_TEST(supports({1, 1536, 4, 4}, {4, 1536, 1, 1}, plain, direction));
    BOOST_TEST(!supports({1, 1537, 4, 4}, {4, 1537, 1, 1}, plain, direction));
    BOOST_TEST(supports({1, 512, 4, 4}, {4, 512, 1, 3}, plain, direction));
    BOOST_TEST(!supports({1, 171, 4, 4}, {4, 171, 3, 3}, plain, direction));
  }
  // The input gradient's: K*R*S <= 1536, and stride 1 only.
  BOOST_TEST(supports({1, 4, 4, 4}, {1536, 4, 1, 1}, plain, ConvDirection::data));
  BOOST_TEST(!supports({1, 4, 4, 4}, {1537, 4, 1, 1}, plain, ConvDirection::data));
  const ConvCase& stride_two = kConvCases[3];
  BOOST_TEST(!supports(stride_two.x, stride_two.w, stride_two.params, ConvDirection::data));
  BOOST_TEST(!supports(stride_two.x, stride_two.w, {1, 2, 1, 1}, ConvDirection::data));
  // The input gradient pads dy by R-1-ph rows: more padding than R-1 has no such forward.
  BOOST_TEST(supports({1, 2, 6, 6}, {3, 2, 3, 3}, {1, 1, 2, 2}, ConvDirection::data));
  BOOST_TEST(!supports({1, 2, 6, 6}, {3, 2, 3, 3}, {1, 1, 3, 2}, ConvDirection::data));
  BOOST_TEST(supports({1, 2, 6, 6}, {3, 2, 3, 3}, {1, 1, 3, 2}, ConvDirection::forward));
  // The filter gradient's output plane: at most 1536 positions (32x48 yes, 29x53 = 1537 no;
  // 40x40 = 1600 no), which the forward does not mind.
  BOOST_TEST(supports({2, 1, 32, 48}, {2, 1, 1, 1}, plain, ConvDirection::filter));
  BOOST_TEST(!supports({2, 1, 29, 53}, {2, 1, 1, 1}, plain, ConvDirection::filter));
  BOOST_TEST(!supports({2, 1, 40, 40}, {2, 1, 3, 3}, {1, 1, 1, 1}, ConvDirection::filter));
  BOOST_TEST(supports({2, 1, 40, 40}, {2, 1, 3, 3}, {1, 1, 1, 1}, ConvDirection::forward));
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
