// The fully connected layer on the GPU: cuBLAS GEMMs plus the project's bias kernels.
#pragma once

#include <cublas_v2.h>

#include "core/dtype.h"

namespace alloy::cuda {

// y = x w^T + b (b may be null); x, w, b, y all `dtype`. The bias is broadcast into y first
// (exact: it already has y's dtype) and the GEMM adds to it with beta = 1.
void linear_forward(cublasHandle_t handle, cudaStream_t stream, int batch, int in, int out,
                    const void* x, const void* w, const void* b, void* y, DType dtype);
// dw += dy^T x (dw f32 or `dtype`); db += column sums of dy (db may be null; f32 or `dtype`);
// dx = dy w unless dx is null.
void linear_backward(cublasHandle_t handle, cudaStream_t stream, int batch, int in, int out,
                     const void* x, const void* w, const void* dy, DType dtype, void* dw,
                     DType dw_dtype, void* db, DType db_dtype, void* dx);

// Adds, for each of `columns` columns, the fp32 sum of its `rows` entries of the row-major
// matrix dy (`dtype`) into bias (`bias_dtype`), in one launch of 32-column tiles by row chunks
// of 128, summed in a fixed order: deterministic.
void add_column_sums(const void* dy, DType dtype, int rows, int columns, void* bias,
                     DType bias_dtype, cudaStream_t stream);

}  // namespace alloy::cuda
