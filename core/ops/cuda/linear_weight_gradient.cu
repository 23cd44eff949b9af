#include "core/ops/cuda/linear_weight_gradient.h"

#include "core/error.h"
#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

namespace {

// A block's tile: 32 inputs by 32 outputs, 256 threads. Thread (lane, row) sums the weights of
// input lane and outputs row, row + 8, row + 16, row + 24 over the batch, 32 batch rows at a time
// from shared memory; the next 32 rows' x and dy are loaded while these are summed.
constexpr int kTileSize = 32;
constexpr int kRows = 8;  // warps of a block
constexpr int kOutputsPerThread = kTileSize / kRows;
constexpr int kWeightThreads = kTileSize * kRows;
// Values of x (and of dy) a thread stages per 32 batch rows.
constexpr int kStaged = kTileSize * kTileSize / kWeightThreads;
// Up to this many weights the kernel runs: 2^18 (LeNet's 800x128 has 102400); ffn's 1024x4096
// (4 M) is where cuBLAS fills the GPU on its own.
constexpr long kMaxWeights = 1L << 18;

template <class T>
__global__ void __launch_bounds__(kWeightThreads)
    linear_weight_gradient_kernel(const T* __restrict__ dy, const T* __restrict__ x, int batch,
                                  int in, int out, void* dw, DType dw_dtype) {
  __shared__ float xs[kTileSize][kTileSize];
  __shared__ float dys[kTileSize][kTileSize];
  const int lane = threadIdx.x % kTileSize, row = threadIdx.x / kTileSize;
  const int i0 = blockIdx.x * kTileSize, o0 = blockIdx.y * kTileSize;
  // Staged value s of a thread: batch row (chunk + row + kRows * s), column lane of the tile.
  float x_next[kStaged], dy_next[kStaged];
  const auto load = [&](int chunk) {
    ALLOY_UNROLL
    for (int s = 0; s < kStaged; ++s) {
      const int b = chunk + row + kRows * s;
      const bool in_batch = b < batch;
      x_next[s] = in_batch && i0 + lane < in
                      ? widen(x[static_cast<std::int64_t>(b) * in + i0 + lane])
                      : 0.0f;
      dy_next[s] = in_batch && o0 + lane < out
                       ? widen(dy[static_cast<std::int64_t>(b) * out + o0 + lane])
                       : 0.0f;
    }
  };
  float acc[kOutputsPerThread] = {};
  load(0);
  for (int chunk = 0; chunk < batch; chunk += kTileSize) {
    __syncthreads();  // the previous chunk's tiles are no longer read
    ALLOY_UNROLL
    for (int s = 0; s < kStaged; ++s) {
      xs[row + kRows * s][lane] = x_next[s];
      dys[row + kRows * s][lane] = dy_next[s];
    }
    __syncthreads();
    if (chunk + kTileSize < batch) load(chunk + kTileSize);
    const int rows = min(kTileSize, batch - chunk);
    for (int b = 0; b < rows; ++b) {
      const float value = xs[b][lane];
      ALLOY_UNROLL
      for (int q = 0; q < kOutputsPerThread; ++q)
        acc[q] = fmaf(dys[b][row + kRows * q], value, acc[q]);
    }
  }
  const int i = i0 + lane;
  if (i >= in) return;
  ALLOY_UNROLL
  for (int q = 0; q < kOutputsPerThread; ++q) {
    const int o = o0 + row + kRows * q;
    if (o >= out) continue;
    const std::int64_t at = static_cast<std::int64_t>(o) * in + i;
    store_any(dw, dw_dtype, at, __fadd_rn(load_any(dw, dw_dtype, at), acc[q]));
  }
}

}  // namespace

bool linear_weight_gradient_fits(int in, int out) {
  return in > 0 && out > 0 && static_cast<long>(in) * out <= kMaxWeights;
}

void linear_weight_gradient(int batch, int in, int out, const void* dy, const void* x, DType dtype,
                            void* dw, DType dw_dtype, cudaStream_t stream) {
  ALLOY_CHECK(linear_weight_gradient_fits(in, out), "linear_weight_gradient: ", out, "x", in,
              " weights are more than its kernel takes");
  ALLOY_CHECK(dw_dtype == DType::f32 || dw_dtype == dtype, "linear_weight_gradient: a ",
              dtype_name(dw_dtype), " gradient of ", dtype_name(dtype), " weights");
  if (batch <= 0) return;
  const dim3 grid((in + kTileSize - 1) / kTileSize, (out + kTileSize - 1) / kTileSize);
  dispatch_floating(dtype, "linear_weight_gradient", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(linear_weight_gradient_kernel, grid, kWeightThreads, 0, stream)
    (static_cast<const T*>(dy), static_cast<const T*>(x), batch, in, out, dw, dw_dtype);
  });
  ALLOY_CUDA_CHECK_LAUNCH("linear_weight_gradient_kernel over ", out, "x", in, " weights and ",
                          batch, " rows");
}

}  // namespace alloy::cuda
