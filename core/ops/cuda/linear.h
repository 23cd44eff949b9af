// The fully connected layer on the GPU: cuBLAS GEMMs plus the project's bias kernels.
#pragma once

#include <cublas_v2.h>

#include "core/device.h"
#include "core/dtype.h"

namespace alloy::cuda {

// y = x w^T + b (b may be null); x, w, b, y all `dtype`. With a bias, one cuBLASLt matmul adds
// it in its epilogue (fp32 accumulation, one rounding); where cuBLASLt offers no algorithm for
// the shape, the bias is broadcast into y first (exact: it already has y's dtype) and a GEMM
// adds to it with beta = 1, the same result in two launches.
void linear_forward(cublasHandle_t handle, cudaStream_t stream, int batch, int in, int out,
                    const void* x, const void* w, const void* b, void* y, DType dtype);
// dw += dy^T x (dw f32 or `dtype`); db += column sums of dy (db may be null; f32 or `dtype`);
// dx = dy w unless dx is null.
void linear_backward(cublasHandle_t handle, cudaStream_t stream, int batch, int in, int out,
                     const void* x, const void* w, const void* dy, DType dtype, void* dw,
                     DType dw_dtype, void* db, DType db_dtype, void* dx);

// The number of bias-epilogue plans made on `device` so far that fuse the bias (fused) or fall
// back to the two-launch path (!fused); tests check which path a shape takes.
int linear_bias_epilogue_plans(Device device, bool fused);

// Adds, for each of `columns` columns, the fp32 sum of its `rows` entries of the row-major
// matrix dy (`dtype`) into bias (`bias_dtype`), in one launch of 32-column tiles by row chunks
// of 128, summed in a fixed order: deterministic.
void add_column_sums(const void* dy, DType dtype, int rows, int columns, void* bias,
                     DType bias_dtype, cudaStream_t stream);

}  // namespace alloy::cuda
