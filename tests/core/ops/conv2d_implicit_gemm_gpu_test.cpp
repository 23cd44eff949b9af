// Alloy's implicit-GEMM convolution kernels (core/ops/cuda/conv2d_implicit_gemm.h), called
// directly, against the CPU convolution on the same data, in f32, f16 and bf16: the direct
// kernels' shapes (LeNet's two layers, padding, stride 2, non-square filters; each a partial
// tile) and one of several tiles each way (70 filters, 1080 taps: the large tap table, 50
// positions); the forward with and without its bias, the filter gradient (its positions in
// several chunks) overwriting garbage or adding to what dw holds, each twice with equal bits;
// and which geometries conv2d_igemm_supports takes.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/ops/conv2d.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/ops/cuda/conv2d_implicit_gemm.h"
#include "tests/support/conv2d_kernels.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(conv2d_implicit_gemm_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

using cuda::ConvDirection;

constexpr DType kTypes[] = {DType::f32, DType::f16, DType::bf16};

// The direct kernels' cases, and one that takes several tiles of filters, taps and positions.
std::vector<ConvCase> cases() {
  std::vector<ConvCase> all(std::begin(kConvCases), std::end(kConvCases));
  all.push_back({{2, 120, 5, 5}, {70, 120, 3, 3}, {1, 1, 1, 1}});
  return all;
}

Tensor igemm_forward(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& w,
                     const Tensor& b) {
  Tensor y = nan_tensor({g.batch, g.filters, g.out_h, g.out_w}, x.dtype());
  cuda::conv2d_igemm_forward(g, x.dtype(), x.raw(), w.raw(), b.defined() ? b.raw() : nullptr,
                             y.raw(), default_stream());
  return y;
}

void igemm_filter(const cpu::Conv2dGeometry& g, const Tensor& x, const Tensor& dy, Tensor& dw,
                  bool accumulate) {
  const std::size_t bytes = cuda::conv2d_igemm_filter_workspace(g);
  Tensor workspace = nan_workspace(bytes);
  cuda::conv2d_igemm_filter(g, x.dtype(), x.raw(), dy.raw(), dw.raw(), accumulate, workspace.raw(),
                            bytes, default_stream());
}

}  // namespace

BOOST_AUTO_TEST_CASE(forward_with_and_without_bias_matches_the_cpu_and_repeats_bit_for_bit) {
  Generator generator(121);
  for (const DType dtype : kTypes) {
    for (const ConvCase& c : cases()) {
      const std::string what = "implicit-GEMM forward " + describe(dtype, c);
      const cpu::Conv2dGeometry g = geometry_of(c);
      BOOST_REQUIRE_MESSAGE(cuda::conv2d_igemm_supports(g, dtype, ConvDirection::forward),
                            what << ": not supported");
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator, -0.2f, 0.2f);
      const Tensor b = random_tensor({c.w[0]}, dtype, generator);
      const Tensor x_gpu = to_cuda(x), w_gpu = to_cuda(w), b_gpu = to_cuda(b);
      const double terms = static_cast<double>(c.w[1] * c.w[2] * c.w[3]);

      const Tensor y = igemm_forward(g, x_gpu, w_gpu, b_gpu);
      check_sum(y, conv2d_forward(x, w, b, c.params),
                conv2d_forward(abs_f32(x), abs_f32(w), abs_f32(b), c.params), dtype, terms,
                what + " with bias");
      check_gpu_equal(igemm_forward(g, x_gpu, w_gpu, b_gpu), to_host(y),
                      what + " with bias, run twice");

      const Tensor y_plain = igemm_forward(g, x_gpu, w_gpu, Tensor());
      check_sum(y_plain, conv2d_forward(x, w, Tensor(), c.params),
                conv2d_forward(abs_f32(x), abs_f32(w), Tensor(), c.params), dtype, terms,
                what + " without bias");
      check_gpu_equal(igemm_forward(g, x_gpu, w_gpu, Tensor()), to_host(y_plain),
                      what + " without bias, run twice");
    }
  }
}

BOOST_AUTO_TEST_CASE(filter_gradient_overwrites_or_accumulates_and_repeats_bit_for_bit) {
  Generator generator(123);
  for (const DType dtype : kTypes) {
    for (const ConvCase& c : cases()) {
      const std::string what = "implicit-GEMM filter gradient " + describe(dtype, c);
      const cpu::Conv2dGeometry g = geometry_of(c);
      BOOST_REQUIRE_MESSAGE(cuda::conv2d_igemm_supports(g, dtype, ConvDirection::filter),
                            what << ": not supported");
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator, -0.2f, 0.2f);
      const Tensor dy = random_tensor(conv2d_output_shape(c.x, c.w, c.params), dtype, generator);
      const Tensor dw_start = random_tensor(c.w, dtype, generator);
      // The CPU adds the gradient to dw in fp32 and rounds once: from zero, the gradient
      // itself; from dw_start, dw_start + gradient.
      Tensor db, dw_fresh = Tensor::zeros(c.w, dtype), dw_added = dw_start.clone();
      conv2d_backward(x, w, dy, dw_fresh, db, c.params, false);
      conv2d_backward(x, w, dy, dw_added, db, c.params, false);
      Tensor dw_magnitude = Tensor::zeros(c.w, DType::f32);
      conv2d_backward(abs_f32(x), abs_f32(w), abs_f32(dy), dw_magnitude, db, c.params, false);
      const Tensor x_gpu = to_cuda(x), dy_gpu = to_cuda(dy);
      const Shape y = conv2d_output_shape(c.x, c.w, c.params);
      const double terms = static_cast<double>(y[0] * y[2] * y[3]);

      // accumulate = false: garbage (NaN) in dw must be overwritten, not read.
      Tensor dw_gpu = nan_tensor(c.w, dtype);
      igemm_filter(g, x_gpu, dy_gpu, dw_gpu, false);
      check_sum(dw_gpu, dw_fresh, dw_magnitude, dtype, terms, what + " into garbage");
      Tensor dw_again = nan_tensor(c.w, dtype);
      igemm_filter(g, x_gpu, dy_gpu, dw_again, false);
      check_gpu_equal(dw_again, to_host(dw_gpu), what + ", run twice");

      // accumulate = true: dw_start + gradient, one fp32 addition and one rounding.
      Tensor dw_sum = to_cuda(dw_start);
      igemm_filter(g, x_gpu, dy_gpu, dw_sum, true);
      check_sum(dw_sum, dw_added, dw_magnitude, dtype, terms, what + " added to dw");
      Tensor dw_sum_again = to_cuda(dw_start);
      igemm_filter(g, x_gpu, dy_gpu, dw_sum_again, true);
      check_gpu_equal(dw_sum_again, to_host(dw_sum), what + " added to dw, run twice");
    }
  }
}

BOOST_AUTO_TEST_CASE(supports_names_what_the_kernels_take) {
  const auto supports = [](const Shape& x, const Shape& w, const Conv2dParams& params,
                           ConvDirection direction, DType dtype = DType::f32,
                           Layout layout = Layout::nchw) {
    return cuda::conv2d_igemm_supports(geometry_of(x, w, params, layout), dtype, direction);
  };
  const ConvCase& lenet = kConvCases[1];
  for (const ConvDirection direction : {ConvDirection::forward, ConvDirection::filter}) {
    for (const DType dtype : kTypes)
      BOOST_TEST(supports(lenet.x, lenet.w, lenet.params, direction, dtype));
    BOOST_TEST(!supports(lenet.x, lenet.w, lenet.params, direction, DType::f16, Layout::nhwc));
    BOOST_TEST(!supports(lenet.x, lenet.w, lenet.params, direction, DType::i32));
  }
  BOOST_TEST(!supports(lenet.x, lenet.w, lenet.params, ConvDirection::data));
  // The forward's table of taps: C*R*S <= 4096; the filter gradient has none.
  const Conv2dParams plain{1, 1, 0, 0};
  BOOST_TEST(supports({1, 4096, 2, 2}, {4, 4096, 1, 1}, plain, ConvDirection::forward));
  BOOST_TEST(!supports({1, 4097, 2, 2}, {4, 4097, 1, 1}, plain, ConvDirection::forward));
  BOOST_TEST(supports({1, 4097, 2, 2}, {4, 4097, 1, 1}, plain, ConvDirection::filter));
  // x past 2^31 elements: not indexable in 32 bits.
  BOOST_TEST(!supports({2, 1024, 1024, 1025}, {4, 1024, 1, 1}, plain, ConvDirection::forward));
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
