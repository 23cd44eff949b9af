#include <algorithm>
#include <climits>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/layer_norm.h"

namespace alloy::cuda {

namespace {

// Row kernels: one block per row, as many threads as the row has features rounded up to a
// warp, at most kThreads; each thread strides over the row.
unsigned int row_threads(std::int64_t features) {
  return static_cast<unsigned int>(
      std::clamp<std::int64_t>((features + 31) / 32 * 32, 32, kThreads));
}

template <class T>
__global__ void forward_kernel(const T* x, std::int64_t features, FeatureData weight,
                               FeatureData bias, float eps, T* y, float* mean, float* rstd) {
  const std::int64_t row = blockIdx.x;
  const T* in = x + row * features;
  T* out = y + row * features;
  const float count = static_cast<float>(features);
  __shared__ float mean_shared, rstd_shared;
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j < features; j += blockDim.x)
    sum += widen(in[j]);
  sum = block_sum(sum);
  if (threadIdx.x == 0) mean_shared = sum / count;
  __syncthreads();
  const float m = mean_shared;
  float squares = 0.0f;
  for (std::int64_t j = threadIdx.x; j < features; j += blockDim.x) {
    const float d = widen(in[j]) - m;
    squares += d * d;
  }
  squares = block_sum(squares);
  if (threadIdx.x == 0) {
    const float r = 1.0f / sqrtf(squares / count + eps);
    rstd_shared = r;
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = r;
  }
  __syncthreads();
  const float r = rstd_shared;
  for (std::int64_t j = threadIdx.x; j < features; j += blockDim.x) {
    const float w = load_any(weight.data, weight.dtype, j);
    const float b = load_any(bias.data, bias.dtype, j);
    out[j] = narrow<T>(((widen(in[j]) - m) * r) * w + b);
  }
}

template <class D, class X>
__global__ void backward_dx_kernel(const D* dy, const X* x, std::int64_t features,
                                   FeatureData weight, const float* mean, const float* rstd,
                                   D* dx) {
  const std::int64_t row = blockIdx.x;
  const D* grad = dy + row * features;
  const X* in = x + row * features;
  D* out = dx + row * features;
  const float count = static_cast<float>(features);
  const float m = mean[row];
  const float r = rstd[row];
  __shared__ float a_shared, c_shared;
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (std::int64_t j = threadIdx.x; j < features; j += blockDim.x) {
    const float g = widen(grad[j]) * load_any(weight.data, weight.dtype, j);
    sum_g += g;
    sum_gx += g * ((widen(in[j]) - m) * r);
  }
  sum_g = block_sum(sum_g);
  sum_gx = block_sum(sum_gx);
  if (threadIdx.x == 0) {
    a_shared = sum_g / count;
    c_shared = sum_gx / count;
  }
  __syncthreads();
  const float a = a_shared;
  const float c = c_shared;
  for (std::int64_t j = threadIdx.x; j < features; j += blockDim.x) {
    const float g = widen(grad[j]) * load_any(weight.data, weight.dtype, j);
    const float xhat = (widen(in[j]) - m) * r;
    out[j] = narrow<D>(r * ((g - a) - xhat * c));
  }
}

// Parameter gradients in tiles of 32 columns by 8 row lanes, as linear's bias sums: the lanes
// of a warp read 32 neighbouring features of a row (coalesced), the block's 8 warps take every
// 8th row of the block's row chunk, and a column's 8 sums are added in warp order. With several
// row chunks (grid y) each block stores its partials and the grid's last block adds them in
// chunk order. Every order is fixed: deterministic.
constexpr int kTileColumns = 32;
constexpr int kTileRows = 8;
constexpr std::int64_t kChunkRows = 128;  // 16 rows per thread
constexpr std::int64_t kMaxRowChunks = 1024;

struct ParamGrads {
  FeatureData dweight, dbias;
};

__device__ void add_param_grads(const ParamGrads& o, std::int64_t column, float dw, float db) {
  store_any(o.dweight.data, o.dweight.dtype, column,
            load_any(o.dweight.data, o.dweight.dtype, column) + dw);
  store_any(o.dbias.data, o.dbias.dtype, column,
            load_any(o.dbias.data, o.dbias.dtype, column) + db);
}

template <class D, class X>
__global__ void param_grads_kernel(const D* dy, const X* x, std::int64_t rows,
                                   std::int64_t features, std::int64_t chunk_rows,
                                   const float* mean, const float* rstd, ParamGrads o,
                                   float* partials, unsigned int* arrivals) {
  __shared__ float tile_dw[kTileRows][kTileColumns + 1];
  __shared__ float tile_db[kTileRows][kTileColumns + 1];
  const std::int64_t column = blockIdx.x * static_cast<std::int64_t>(kTileColumns) + threadIdx.x;
  const std::int64_t begin = blockIdx.y * chunk_rows;
  const std::int64_t end = min(begin + chunk_rows, rows);
  float dw = 0.0f, db = 0.0f;
  if (column < features) {
    for (std::int64_t row = begin + threadIdx.y; row < end; row += kTileRows) {
      const std::int64_t i = row * features + column;
      const float g = widen(dy[i]);
      dw += g * ((widen(x[i]) - mean[row]) * rstd[row]);
      db += g;
    }
  }
  tile_dw[threadIdx.y][threadIdx.x] = dw;
  tile_db[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0) {
    dw = 0.0f;
    db = 0.0f;
    for (int lane = 0; lane < kTileRows; ++lane) {
      dw += tile_dw[lane][threadIdx.x];
      db += tile_db[lane][threadIdx.x];
    }
  }
  if (gridDim.y == 1) {
    if (threadIdx.y == 0 && column < features) add_param_grads(o, column, dw, db);
    return;
  }
  if (threadIdx.y == 0 && column < features) {
    partials[2 * blockIdx.y * features + column] = dw;
    partials[(2 * blockIdx.y + 1) * features + column] = db;
  }
  if (!arrive_last(arrivals)) return;
  for (std::int64_t c = threadIdx.y * kTileColumns + threadIdx.x; c < features;
       c += kTileColumns * kTileRows) {
    float total_dw = 0.0f, total_db = 0.0f;
    for (unsigned int k = 0; k < gridDim.y; ++k) {
      total_dw += __ldcg(partials + 2 * k * features + c);
      total_db += __ldcg(partials + (2 * k + 1) * features + c);
    }
    add_param_grads(o, c, total_dw, total_db);
  }
}

void check_geometry(const LayerNormGeometry& g, const char* op) {
  ALLOY_CHECK(g.rows <= INT_MAX, op, ": ", g.rows, " rows do not fit one grid's x dimension");
}

}  // namespace

void layer_norm_forward(const void* x, DType x_dtype, const LayerNormGeometry& g,
                        FeatureData weight, FeatureData bias, float eps, void* y, float* mean,
                        float* rstd, cudaStream_t stream) {
  check_geometry(g, "layer_norm_forward");
  if (g.rows == 0) return;
  dispatch_floating(x_dtype, "layer_norm_forward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(forward_kernel, static_cast<unsigned int>(g.rows), row_threads(g.features), 0,
                 stream)
    (static_cast<const T*>(x), g.features, weight, bias, eps, static_cast<T*>(y), mean, rstd);
    ALLOY_CUDA_CHECK_LAUNCH("layer_norm forward_kernel over ", g.rows, " rows of ", g.features);
  });
}

void layer_norm_backward(const void* dy, DType dy_dtype, const void* x, DType x_dtype,
                         const LayerNormGeometry& g, FeatureData weight, const float* mean,
                         const float* rstd, void* dx, FeatureData dweight, FeatureData dbias,
                         cudaStream_t stream) {
  check_geometry(g, "layer_norm_backward");
  if (g.rows == 0) return;
  const std::int64_t chunks =
      std::clamp<std::int64_t>((g.rows + kChunkRows - 1) / kChunkRows, 1, kMaxRowChunks);
  const std::int64_t chunk_rows = (g.rows + chunks - 1) / chunks;
  const std::int64_t used_chunks = (g.rows + chunk_rows - 1) / chunk_rows;
  const DeviceBuffer partials =
      used_chunks > 1
          ? reduction_workspace(2 * sizeof(float) * static_cast<std::size_t>(used_chunks) *
                                static_cast<std::size_t>(g.features))
          : DeviceBuffer();
  unsigned int* arrivals =
      used_chunks > 1 ? arrival_counter(ArrivalSlot::layer_norm_params) : nullptr;
  const dim3 param_grid(static_cast<unsigned int>((g.features + kTileColumns - 1) / kTileColumns),
                        static_cast<unsigned int>(used_chunks));
  dispatch_floating_pair(dy_dtype, x_dtype, "layer_norm_backward", [&](auto d_type, auto x_type) {
    using D = decltype(d_type);
    using X = decltype(x_type);
    ALLOY_LAUNCH(backward_dx_kernel, static_cast<unsigned int>(g.rows), row_threads(g.features), 0,
                 stream)
    (static_cast<const D*>(dy), static_cast<const X*>(x), g.features, weight, mean, rstd,
     static_cast<D*>(dx));
    ALLOY_CUDA_CHECK_LAUNCH("layer_norm backward_dx_kernel over ", g.rows, " rows of ", g.features);
    ALLOY_LAUNCH(param_grads_kernel, param_grid, dim3(kTileColumns, kTileRows), 0, stream)
    (static_cast<const D*>(dy), static_cast<const X*>(x), g.rows, g.features, chunk_rows, mean,
     rstd, ParamGrads{dweight, dbias}, partials.as<float>(), arrivals);
    ALLOY_CUDA_CHECK_LAUNCH("layer_norm param_grads_kernel over ", g.rows, "x", g.features, " in ",
                            used_chunks, " row chunks");
  });
}

}  // namespace alloy::cuda
