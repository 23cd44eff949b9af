#include "core/cuda/check.h"
#include "core/ops/allow_tf32.h"
#include "core/ops/cuda/gemm.h"

namespace alloy::cuda {

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      fail("no CUDA floating type for dtype ", dtype_name(dtype));
  }
}

cublasComputeType_t gemm_compute_type(DType ab_dtype) {
  return ab_dtype == DType::f32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int m, int n, int k,
          float alpha, const void* a, int lda, const void* b, int ldb, DType ab_dtype, float beta,
          void* c, int ldc, DType c_dtype) {
  if (m == 0 || n == 0) return;
  // cuBLAS is column-major: a row-major [m, n] c is a column-major [n, m] one, so compute
  // c^T = op(b)^T op(a)^T by swapping the operands.
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  ALLOY_CUDA_CHECK(
      cublasGemmEx(handle, op_b, op_a, n, m, k, &alpha, b, cuda_data_type(ab_dtype), ldb, a,
                   cuda_data_type(ab_dtype), lda, &beta, c, cuda_data_type(c_dtype), ldc,
                   gemm_compute_type(ab_dtype), CUBLAS_GEMM_DEFAULT),
      "gemm ", transpose_a ? "a^T" : "a", " * ", transpose_b ? "b^T" : "b", " with m=", m, " n=", n,
      " k=", k, ", ", dtype_name(ab_dtype), " inputs into ", dtype_name(c_dtype));
}

}  // namespace alloy::cuda
