// Row-major GEMM through cuBLAS (cublasGemmEx): c = alpha op(a) op(b) + beta c, with fp32
// accumulation whatever the storage (gemm_compute_type): fp32 inputs stay true fp32 unless
// --allow-tf32 (core/ops/allow_tf32.h) lets them run on TF32 tensor cores; half inputs run on
// tensor cores. c may be f32 with half a and b (O1's fp32 weight
// gradients from half activations). beta == 0 ignores c's old contents, NaN included.
#pragma once

#include <cublas_v2.h>

#include "core/dtype.h"

namespace alloy::cuda {

void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int m, int n, int k,
          float alpha, const void* a, int lda, const void* b, int ldb, DType ab_dtype, float beta,
          void* c, int ldc, DType c_dtype);

cudaDataType_t cuda_data_type(DType dtype);

// The compute type of a GEMM of `ab_dtype` inputs: CUBLAS_COMPUTE_32F, or for f32 inputs with
// allow_tf32() CUBLAS_COMPUTE_32F_FAST_TF32 (cuBLAS and cuBLASLt alike).
cublasComputeType_t gemm_compute_type(DType ab_dtype);

}  // namespace alloy::cuda
