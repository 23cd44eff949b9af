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
      BOOST_REQUIRE_MESSAGE(
          cuda::conv2d_igemm_supports(geometry_of(c), dtype, ConvDirection::forward),
          "implicit-GEMM forward " << describe(dtype, c) << ": not supported");
      check_forward_kernel("implicit-GEMM forward", c, dtype, generator, igemm_forward);
    }
  }
}

BOOST_AUTO_TEST_CASE(filter_gradient_overwrites_or_accumulates_and_repeats_bit_for_bit) {
  Generator generator(123);
  for (const DType dtype : kTypes) {
    for (const ConvCase& c : cases()) {
      BOOST_REQUIRE_MESSAGE(
          cuda::conv2d_igemm_supports(geometry_of(c), dtype, ConvDirection::filter),
          "implicit-GEMM filter gradient " << describe(dtype, c) << ": not supported");
      check_filter_kernel("implicit-GEMM filter gradient", c, dtype, generator, igemm_filter);
    }
  }
}

BOOST_AUTO_TEST_CASE(supports_names_what_the_kernels_take) {
  const auto supports = [](const Shape& x, const Shape& w, const Conv2dParams& params,
                           ConvDirection direction, DType dtype = DType::f32,
                           Layout layout = Layout::nchw) {
    return cuda::conv2d_igemm_supports(conv2d_geometry(x, w, params, layout), dtype, direction);
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
