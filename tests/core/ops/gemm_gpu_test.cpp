// cuBLAS GEMM against the CPU GEMM in every dtype and transpose, with fp32 accumulation.
// Sums of K products differ only in order: tolerance grows with sqrt(K) for values near zero.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/ops/gemm.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(gemm_gpu)

BOOST_AUTO_TEST_CASE(every_dtype_and_transpose_matches_the_cpu) {
  Generator generator(51);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  const int m = 37, n = 53, k = 300;
  for (const DType dtype : types) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dtype, generator);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dtype, generator);
        const Tensor c0 = random_tensor({m, n}, dtype, generator);
        for (const float beta : {0.0f, 0.5f}) {
          const GemmShape shape{ta, tb, 1.25f, beta};
          Tensor c_cpu = c0.clone();
          Tensor c_gpu = to_cuda(c0);
          gemm(a, b, c_cpu, shape);
          gemm(to_cuda(a), to_cuda(b), c_gpu, shape);
          const std::string what = std::string("gemm ") + dtype_name(dtype) + (ta ? " a^T" : " a") +
                                   (tb ? " b^T" : " b") + " beta " + std::to_string(beta);
          check_gpu_close(c_gpu, c_cpu, what, gpu_tolerance(dtype),
                          (dtype == DType::f32 ? 1e-5 : gpu_tolerance(dtype)) * std::sqrt(k));
        }
      }
    }
  }
}

#ifdef ALLOY_HAVE_CUDA
// The numerics contract's fp32 accumulation covers split-k reductions too, and cuBLAS works in
// the allocator's workspace (so it allocates nothing during a graph capture).
BOOST_AUTO_TEST_CASE(cublas_reduces_in_fp32_in_the_allocators_workspace) {
  const cuda::DeviceContext& ctx = cuda::context(Device::cuda(0));
  cublasMath_t mode{};
  BOOST_REQUIRE(cublasGetMathMode(ctx.cublas.get(), &mode) == CUBLAS_STATUS_SUCCESS);
  BOOST_TEST((mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) != 0);
  BOOST_TEST((mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) == CUBLAS_DEFAULT_MATH);
  BOOST_TEST(ctx.cublas.workspace() != nullptr);
  BOOST_TEST(ctx.cublas.workspace_bytes() == cuda::CublasHandle::kCublasWorkspaceBytes);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
