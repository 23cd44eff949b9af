#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/gemm.h"
#include "core/ops/cuda/linear.h"

namespace alloy::cuda {

namespace {

template <class T>
__global__ void broadcast_rows_kernel(const T* b, T* y, std::int64_t rows, int columns) {
  ALLOY_GRID_STRIDE(i, rows * columns) {
    y[i] = b[i % columns];
  }
}

// One thread per column walks the rows in order; neighbouring threads read neighbouring
// columns, so loads coalesce.
__global__ void column_sums_kernel(const void* dy, DType dtype, int rows, int columns, void* bias,
                                   DType bias_dtype) {
  ALLOY_GRID_STRIDE(column, columns) {
    float sum = 0.0f;
    for (int row = 0; row < rows; ++row) {
      sum += load_any(dy, dtype, static_cast<std::int64_t>(row) * columns + column);
    }
    store_any(bias, bias_dtype, column, load_any(bias, bias_dtype, column) + sum);
  }
}

}  // namespace

void add_column_sums(const void* dy, DType dtype, int rows, int columns, void* bias,
                     DType bias_dtype, cudaStream_t stream) {
  if (columns == 0) return;
  column_sums_kernel<<<grid_for(columns), kThreads, 0, stream>>>(dy, dtype, rows, columns, bias,
                                                                 bias_dtype);
  ALLOY_CUDA_CHECK_LAUNCH("column_sums_kernel over ", rows, "x", columns);
}

void linear_forward(cublasHandle_t handle, cudaStream_t stream, int batch, int in, int out,
                    const void* x, const void* w, const void* b, void* y, DType dtype) {
  float beta = 0.0f;
  if (b != nullptr && batch > 0) {
    const std::int64_t count = std::int64_t{batch} * out;
    dispatch_floating(dtype, "linear_forward", [&](auto type) {
      using T = decltype(type);
      broadcast_rows_kernel<<<grid_for(count), kThreads, 0, stream>>>(
          static_cast<const T*>(b), static_cast<T*>(y), batch, out);
    });
    ALLOY_CUDA_CHECK_LAUNCH("broadcast_rows_kernel for a [", batch, ", ", out, "] bias");
    beta = 1.0f;
  }
  // y[batch, out] = x[batch, in] w[out, in]^T
  gemm(handle, false, true, batch, out, in, 1.0f, x, in, w, in, dtype, beta, y, out, dtype);
}

void linear_backward(cublasHandle_t handle, cudaStream_t stream, int batch, int in, int out,
                     const void* x, const void* w, const void* dy, DType dtype, void* dw,
                     DType dw_dtype, void* db, DType db_dtype, void* dx) {
  // dw[out, in] += dy[batch, out]^T x[batch, in]
  gemm(handle, true, false, out, in, batch, 1.0f, dy, out, x, in, dtype, 1.0f, dw, in, dw_dtype);
  if (db != nullptr) add_column_sums(dy, dtype, batch, out, db, db_dtype, stream);
  // dx[batch, in] = dy[batch, out] w[out, in]
  if (dx != nullptr) {
    gemm(handle, false, false, batch, in, out, 1.0f, dy, out, w, in, dtype, 0.0f, dx, in, dtype);
  }
}

}  // namespace alloy::cuda
