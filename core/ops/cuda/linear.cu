#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/gemm.h"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/linear.h"

namespace alloy::cuda {

namespace {

template <class T>
__global__ void broadcast_rows_kernel(const T* b, T* y, std::int64_t rows, int columns) {
  ALLOY_GRID_STRIDE(i, rows * columns) {
    y[i] = b[i % columns];
  }
}

// Column sums in tiles of 32 columns by 8 row lanes: the lanes of a warp read 32 neighbouring
// columns of a row (coalesced), the block's 8 warps take every 8th row of the block's row
// chunk, and the 8 sums of a column are added in warp order. With several row chunks (grid y),
// each block stores its partial sums and the grid's last block adds them in chunk order. Every
// order is fixed: deterministic.
constexpr int kTileColumns = 32;
constexpr int kTileRows = 8;
constexpr int kChunkRows = 128;  // 16 rows per thread
constexpr int kMaxRowChunks = 1024;

__global__ void column_sums_kernel(const void* dy, DType dtype, int rows, int columns,
                                   int chunk_rows, void* bias, DType bias_dtype, float* partials,
                                   unsigned int* arrivals) {
  __shared__ float tile[kTileRows][kTileColumns + 1];
  const int column = blockIdx.x * kTileColumns + threadIdx.x;
  const int begin = blockIdx.y * chunk_rows;
  const int end = min(begin + chunk_rows, rows);
  float sum = 0.0f;
  if (column < columns) {
    for (int row = begin + threadIdx.y; row < end; row += kTileRows)
      sum += load_any(dy, dtype, static_cast<std::int64_t>(row) * columns + column);
  }
  tile[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0) {
    sum = 0.0f;
    for (int lane = 0; lane < kTileRows; ++lane)
      sum += tile[lane][threadIdx.x];
  }
  if (gridDim.y == 1) {
    if (threadIdx.y == 0 && column < columns) {
      store_any(bias, bias_dtype, column, load_any(bias, bias_dtype, column) + sum);
    }
    return;
  }
  if (threadIdx.y == 0 && column < columns) {
    partials[static_cast<std::int64_t>(blockIdx.y) * columns + column] = sum;
  }
  if (!arrive_last(arrivals)) return;
  for (int c = threadIdx.y * kTileColumns + threadIdx.x; c < columns;
       c += kTileColumns * kTileRows) {
    float total = 0.0f;
    for (unsigned int k = 0; k < gridDim.y; ++k)
      total += __ldcg(partials + static_cast<std::int64_t>(k) * columns + c);
    store_any(bias, bias_dtype, c, load_any(bias, bias_dtype, c) + total);
  }
}

}  // namespace

void add_column_sums(const void* dy, DType dtype, int rows, int columns, void* bias,
                     DType bias_dtype, cudaStream_t stream) {
  if (columns == 0) return;
  const int chunks = std::clamp((rows + kChunkRows - 1) / kChunkRows, 1, kMaxRowChunks);
  const int chunk_rows = std::max((rows + chunks - 1) / chunks, 1);
  const int used_chunks = std::max((rows + chunk_rows - 1) / chunk_rows, 1);
  const DeviceBuffer partials =
      used_chunks > 1
          ? reduction_workspace(sizeof(float) * static_cast<std::size_t>(used_chunks) * columns)
          : DeviceBuffer();
  unsigned int* arrivals =
      used_chunks > 1 ? arrival_counter(ArrivalSlot::column_sums, stream) : nullptr;
  const dim3 grid((columns + kTileColumns - 1) / kTileColumns,
                  static_cast<unsigned int>(used_chunks));
  column_sums_kernel<<<grid, dim3(kTileColumns, kTileRows), 0, stream>>>(
      dy, dtype, rows, columns, chunk_rows, bias, bias_dtype, partials.as<float>(), arrivals);
  ALLOY_CUDA_CHECK_LAUNCH("column_sums_kernel over ", rows, "x", columns, " in ", used_chunks,
                          " row chunks");
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
