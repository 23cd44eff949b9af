// Row-major GEMM through cuBLAS (cublasGemmEx): c = alpha op(a) op(b) + beta c, with fp32
// accumulation (CUBLAS_COMPUTE_32F) whatever the storage: fp32 inputs stay true fp32 (no
// TF32), half inputs run on tensor cores. c may be f32 with half a and b (O1's fp32 weight
// gradients from half activations). beta == 0 ignores c's old contents, NaN included.
#pragma once

#include <cublas_v2.h>

#include "core/dtype.h"

namespace alloy::cuda {

void gemm(cublasHandle_t handle, bool transpose_a, bool transpose_b, int m, int n, int k,
          float alpha, const void* a, int lda, const void* b, int ldb, DType ab_dtype, float beta,
          void* c, int ldc, DType c_dtype);

cudaDataType_t cuda_data_type(DType dtype);

}  // namespace alloy::cuda
