// Alloy's GEMM for small products (core/ops/cuda/small_gemm.h) against the CPU's gemm: both
// operands plain or transposed, every dtype, overwriting and accumulating, shapes that end
// inside a 32x32 tile and a 32-deep k chunk; reruns bit-identical; the sizes it takes. The
// linear layers' use of it (bias, fp32 gradients of half layers) is linear_gpu_test's.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/gemm.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/small_gemm.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(small_gemm_gpu)

#ifdef ALLOY_HAVE_CUDA
namespace {

cudaStream_t stream() {
  return cuda::context(Device::cuda(0)).stream.get();
}

Tensor gpu_product(const cuda::SmallGemm& shape, const Tensor& a, const Tensor& b, const Tensor& c,
                   bool accumulate) {
  Tensor out = to_cuda(c);
  cuda::small_gemm(shape, to_cuda(a).raw(), to_cuda(b).raw(), a.dtype(), nullptr, out.raw(),
                   c.dtype(), accumulate, stream());
  return out;
}

// What small_gemm promises to compute, bit for bit: each output's fused multiply-adds over k in
// order from 0 in fp32, then the bias and c's old value added in fp32, rounded once.
Tensor sequential_product(const cuda::SmallGemm& shape, const Tensor& a, const Tensor& b,
                          const Tensor& bias, const Tensor& c, bool accumulate) {
  const std::vector<float> av = a.to_floats(), bv = b.to_floats(), cv = c.to_floats();
  const std::vector<float> biases = bias.defined() ? bias.to_floats() : std::vector<float>();
  std::vector<float> out(cv.size());
  for (int i = 0; i < shape.m; ++i) {
    for (int j = 0; j < shape.n; ++j) {
      float sum = 0.0f;
      for (int kk = 0; kk < shape.k; ++kk) {
        const float left = shape.a_transposed ? av[kk * shape.m + i] : av[i * shape.k + kk];
        const float right = shape.b_transposed ? bv[j * shape.k + kk] : bv[kk * shape.n + j];
        sum = std::fmaf(left, right, sum);
      }
      if (bias.defined()) sum += biases[j];
      if (accumulate) sum = cv[i * shape.n + j] + sum;
      out[i * shape.n + j] = sum;
    }
  }
  return Tensor::from_floats(c.shape(), out, c.dtype());
}

}  // namespace

// The sums' order is the kernel's contract (deterministic on any GPU): every output equals the
// sequential fp32 reference bit for bit, over several 32-deep chunks (more than the kernel has
// in flight at once) and a partial last one, with a bias, accumulating into fp32 c.
BOOST_AUTO_TEST_CASE(equals_the_sequential_fp32_sum_bit_for_bit) {
  Generator generator(142);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const bool accumulate : {false, true}) {
      const cuda::SmallGemm shape{40, 33, 300, false, true};
      const Tensor a = random_tensor({shape.m, shape.k}, dtype, generator);
      const Tensor b = random_tensor({shape.n, shape.k}, dtype, generator);
      const Tensor bias = random_tensor({shape.n}, dtype, generator);
      const Tensor c = random_tensor({shape.m, shape.n}, DType::f32, generator);
      Tensor out = to_cuda(c);
      cuda::small_gemm(shape, to_cuda(a).raw(), to_cuda(b).raw(), dtype, to_cuda(bias).raw(),
                       out.raw(), DType::f32, accumulate, stream());
      BOOST_TEST(same_bits(to_host(out), sequential_product(shape, a, b, bias, c, accumulate)),
                 dtype_name(dtype) << (accumulate ? " accumulating" : ""));
    }
  }
}

BOOST_AUTO_TEST_CASE(matches_the_cpu_gemm_for_every_transposition_and_repeats_bit_for_bit) {
  Generator generator(141);
  struct Case {
    int m, n, k;
  };
  // LeNet's weight gradient and input gradient at batch 256; the longest sum it takes; partial
  // tiles and a partial last k chunk; k of 1 and 0 (c alone, or zero).
  for (const Case s : {Case{128, 800, 256}, Case{256, 800, 128}, Case{256, 128, 512},
                       Case{37, 45, 500}, Case{37, 45, 33}, Case{3, 2, 1}, Case{5, 4, 0}}) {
    for (const bool a_transposed : {false, true}) {
      for (const bool b_transposed : {false, true}) {
        for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
          for (const bool accumulate : {false, true}) {
            const std::string what = std::string(dtype_name(dtype)) + " [" + std::to_string(s.m) +
                                     ", " + std::to_string(s.k) + "] x [" + std::to_string(s.k) +
                                     ", " + std::to_string(s.n) + "]" +
                                     (a_transposed ? " a^T" : "") + (b_transposed ? " b^T" : "") +
                                     (accumulate ? " accumulating" : "");
            const Tensor a =
                random_tensor(a_transposed ? Shape{s.k, s.m} : Shape{s.m, s.k}, dtype, generator);
            const Tensor b =
                random_tensor(b_transposed ? Shape{s.n, s.k} : Shape{s.k, s.n}, dtype, generator);
            const Tensor c = random_tensor({s.m, s.n}, dtype, generator);
            Tensor expected = c.clone();
            gemm(a, b, expected, {a_transposed, b_transposed, 1.0f, accumulate ? 1.0f : 0.0f});
            const cuda::SmallGemm shape{s.m, s.n, s.k, a_transposed, b_transposed};
            const Tensor gpu = gpu_product(shape, a, b, c, accumulate);
            const double tol = gpu_tolerance(dtype);
            const double atol = (dtype == DType::f32 ? 1e-5 : tol) * std::sqrt(std::max(s.k, 1));
            check_gpu_close(gpu, expected, what, tol, atol);
            check_gpu_equal(gpu_product(shape, a, b, c, accumulate), to_host(gpu),
                            what + ", run twice");
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(takes_up_to_2_to_the_18_outputs_and_k_up_to_512) {
  BOOST_TEST(cuda::small_gemm_fits(128, 800, 256));
  BOOST_TEST(cuda::small_gemm_fits(512, 512, 512));
  BOOST_TEST(!cuda::small_gemm_fits(513, 512, 10));
  BOOST_TEST(!cuda::small_gemm_fits(512, 512, 513));
  // Longer sums are cuBLAS's, however few the outputs: LeNet's first forward among them.
  BOOST_TEST(!cuda::small_gemm_fits(256, 128, 800));
  BOOST_TEST(!cuda::small_gemm_fits(2, 2, 513));
  BOOST_TEST(!cuda::small_gemm_fits(256, 256, 784));
  BOOST_TEST(!cuda::small_gemm_fits(0, 10, 10));
  const Tensor c = Tensor::zeros({2, 2}, DType::bf16, Device::cuda(0));
  BOOST_CHECK_EXCEPTION(cuda::small_gemm({2, 2, 2}, c.raw(), c.raw(), DType::f16, nullptr,
                                         const_cast<void*>(c.raw()), DType::bf16, false, stream()),
                        Error, [](const Error& error) {
                          return std::string(error.what()).find("bf16 output of f16") !=
                                 std::string::npos;
                        });
}
#else
BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first
#endif

BOOST_AUTO_TEST_SUITE_END()
