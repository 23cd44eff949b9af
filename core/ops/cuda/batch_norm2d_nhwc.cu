#include "core/ops/cuda/batch_norm2d_nhwc.h"

#include "core/ops/cuda/batch_norm2d_common.cuh"
#include "core/ops/cuda/channel_reduce.cuh"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/nhwc_rows.cuh"
#include "core/ops/cuda/plane_vectors.cuh"

namespace alloy::cuda {

namespace {

// A reduction's blocks: one wave of kRowReduceMinBlocks on each of an H100's or H200's 132
// SMs, so that no block waits for a second wave; their partials a second launch merges.
constexpr std::int64_t kReduceBlocks = kRowReduceMinBlocks * 132;

// The moments of the rows a thread has read, V channels: their count and per channel their
// mean and sum of squared deviations from it.
template <int V>
struct RowMoments {
  float count;
  float mean[V], squares[V];
};

// `total` merged with b (Chan et al.'s pairwise update, merge_moments per channel); b may be
// empty, total too.
template <int V>
__device__ __forceinline__ void merge_row_moments(RowMoments<V>& total, float count,
                                                  const float (&mean)[V],
                                                  const float (&squares)[V]) {
  if (count == 0.0f) return;
  const float n = total.count + count;
  const float share = count / n;
  const float cross = total.count * count / n;
  for (int k = 0; k < V; ++k) {
    const float delta = mean[k] - total.mean[k];
    total.mean[k] += delta * share;
    total.squares[k] += squares[k] + delta * delta * cross;
  }
  total.count = n;
}

// Merges m over the block's row lanes (threadIdx.y) in a fixed tree, in `buffer`
// (blockDim.x * blockDim.y * (2V + 1) floats of shared memory); every thread gets its lane's
// total. Every thread of the block calls it.
template <int V>
__device__ __forceinline__ void merge_over_row_lanes(RowMoments<V>& m, float* buffer) {
  constexpr int kFloats = 2 * V + 1;
  const unsigned int lanes = blockDim.x;
  float* own = buffer + (threadIdx.y * lanes + threadIdx.x) * kFloats;
  own[0] = m.count;
  for (int k = 0; k < V; ++k) {
    own[1 + k] = m.mean[k];
    own[1 + V + k] = m.squares[k];
  }
  for (unsigned int rows = blockDim.y; rows > 1;) {
    const unsigned int half = (rows + 1) / 2;
    __syncthreads();
    if (threadIdx.y + half < rows) {
      const float* other = own + half * lanes * kFloats;
      float mean[V], squares[V];
      for (int k = 0; k < V; ++k) {
        mean[k] = other[1 + k];
        squares[k] = other[1 + V + k];
      }
      merge_row_moments<V>(m, other[0], mean, squares);
      own[0] = m.count;
      for (int k = 0; k < V; ++k) {
        own[1 + k] = m.mean[k];
        own[1 + V + k] = m.squares[k];
      }
    }
    rows = half;
  }
  __syncthreads();
  const float* total = buffer + threadIdx.x * kFloats;
  m.count = total[0];
  for (int k = 0; k < V; ++k) {
    m.mean[k] = total[1 + k];
    m.squares[k] = total[1 + V + k];
  }
}

// Per (chunk, channel): the chunk's mean and sum of squared deviations from it, in one read of
// x. The numerics are the NCHW kernel's (two passes over a piece, Chan et al.'s update between
// pieces), with smaller pieces: each batch of U rows a thread loads is summed, its mean taken
// and its squared deviations summed from registers; the batches merge into the thread's moments,
// the row lanes' in a fixed tree, the chunks in the merge launch in chunk order.
template <class T, int V>
__global__ void __launch_bounds__(kRowReduceThreads, kRowReduceMinBlocks)
    nhwc_statistics_kernel(const T* x, RowSplit s, TrainOutputs o, float* partials, Width<V>) {
  // Batches of three vectors of 8 halves: four spill under the launch bounds' 80 registers.
  constexpr int U = V == 8 ? 3 : kWideBatch<V>;
  __shared__ float buffer[kRowReduceThreads * (2 * V + 1)];
  const unsigned int chunk = blockIdx.x;
  const unsigned int group = row_group();
  RowMoments<V> m = {};
  for_row_vectors<V, U>(s, chunk, group, [&](const std::int64_t(&at)[U], unsigned int used) {
    float v[U][V];
    for (int u = 0; u < U; ++u)
      load_pack<V>(x, at[u], v[u]);
    const float count = static_cast<float>(used);
    float mean[V] = {}, squares[V] = {};
    for (int u = 0; u < U; ++u) {
      if (u >= static_cast<int>(used)) break;
      for (int k = 0; k < V; ++k)
        mean[k] += v[u][k];
    }
    for (int k = 0; k < V; ++k)
      mean[k] = mean[k] / count;
    for (int u = 0; u < U; ++u) {
      if (u >= static_cast<int>(used)) break;
      for (int k = 0; k < V; ++k) {
        const float d = v[u][k] - mean[k];
        squares[k] += d * d;
      }
    }
    merge_row_moments<V>(m, count, mean, squares);
  });
  merge_over_row_lanes<V>(m, buffer);
  if (threadIdx.y != 0 || group >= s.groups) return;
  for (int k = 0; k < V; ++k) {
    const std::int64_t c = std::int64_t{group} * V + k;
    if (gridDim.x == 1) {
      finish_statistics(o, c, m.count, m.mean[k], m.squares[k]);
    } else {
      float* partial = partials + 2 * (std::int64_t{chunk} * s.channels + c);
      partial[0] = m.mean[k];
      partial[1] = m.squares[k];
    }
  }
}

// Each channel's chunks of nhwc_statistics_kernel merged in chunk order.
__global__ void __launch_bounds__(kRowReduceThreads)
    nhwc_statistics_merge_kernel(const float* partials, RowSplit s, TrainOutputs o) {
  merge_chunk_partials<2>(
      partials, s.channels, s.chunks, Moments{0.0f, 0.0f, 0.0f},
      [&](unsigned int k, const float(&partial)[2]) {
        return Moments{static_cast<float>(chunk_rows(s, k)), partial[0], partial[1]};
      },
      merge_moments,
      [&](std::int64_t c, const Moments& m) {
        finish_statistics(o, c, m.count, m.mean, m.squares);
      });
}

// y = x * scale + shift per channel, with relu max(0, .) before the one rounding (the bits
// relu_forward gives after it).
template <class T, int V>
__global__ void nhwc_affine_kernel(const T* x, T* y, RowSplit s, const float* scale,
                                   const float* shift, bool relu, Width<V>) {
  constexpr int U = kBatch<V>;
  const unsigned int group = row_group();
  if (group >= s.groups) return;
  float a[V], b[V];
  for (int k = 0; k < V; ++k) {
    a[k] = scale[group * V + k];
    b[k] = shift[group * V + k];
  }
  for_row_vectors<V, U>(s, blockIdx.x, group, [&](const std::int64_t(&at)[U], unsigned int used) {
    float v[U][V];
    for (int u = 0; u < U; ++u)
      load_pack<V>(x, at[u], v[u]);
    for (unsigned int u = 0; u < used; ++u) {
      for (int k = 0; k < V; ++k) {
        const float r = v[u][k] * a[k] + b[k];
        v[u][k] = relu && r <= 0.0f ? 0.0f : r;
      }
      store_pack<V>(y, at[u], v[u]);
    }
  });
}

// sum dy and sum dy (x - mean) of a chunk or several.
struct GradSums {
  float dy, dy_xmu;
};

__device__ __forceinline__ GradSums add_sums(const GradSums& a, const GradSums& b) {
  return {a.dy + b.dy, a.dy_xmu + b.dy_xmu};
}

// Per (chunk, channel): sum dy and sum dy (x - mean) in one pass, dy masked; chunks summed in
// the merge launch in a fixed order, which also accumulates dweight and dbias.
template <class X, class D, int V>
__global__ void __launch_bounds__(kRowReduceThreads, kRowReduceMinBlocks)
    nhwc_backward_reduce_kernel(const X* x, const D* dy, ReluMask mask, RowSplit s,
                                const float* mean, BackwardOutputs o, float* partials, Width<V>) {
  constexpr int U = kBatch<V>;
  __shared__ float buffer[kRowReduceThreads * V];
  const unsigned int chunk = blockIdx.x;
  const unsigned int group = row_group();
  float m[V];
  for (int k = 0; k < V; ++k)
    m[k] = group < s.groups ? mean[group * V + k] : 0.0f;
  float total_dy[V] = {}, total_dy_xmu[V] = {};
  for_row_vectors<V, U>(s, chunk, group, [&](const std::int64_t(&at)[U], unsigned int used) {
    float xv[U][V], g[U][V];
    for (int u = 0; u < U; ++u)
      load_pack<V>(x, at[u], xv[u]);
    load_grads<V>(dy, mask, at, g);
    for (int u = 0; u < U; ++u) {
      if (u >= static_cast<int>(used)) break;
      for (int k = 0; k < V; ++k) {
        total_dy[k] += g[u][k];
        total_dy_xmu[k] += g[u][k] * (xv[u][k] - m[k]);
      }
    }
  });
  sum_over_row_lanes<V>(total_dy, buffer);
  sum_over_row_lanes<V>(total_dy_xmu, buffer);
  if (threadIdx.y != 0 || group >= s.groups) return;
  for (int k = 0; k < V; ++k) {
    const std::int64_t c = std::int64_t{group} * V + k;
    if (gridDim.x == 1) {
      finish_backward(o, c, total_dy[k], total_dy_xmu[k]);
    } else {
      float* partial = partials + 2 * (std::int64_t{chunk} * s.channels + c);
      partial[0] = total_dy[k];
      partial[1] = total_dy_xmu[k];
    }
  }
}

// Each channel's chunks of nhwc_backward_reduce_kernel summed in chunk order.
__global__ void __launch_bounds__(kRowReduceThreads)
    nhwc_backward_merge_kernel(const float* partials, RowSplit s, BackwardOutputs o) {
  merge_chunk_partials<2>(
      partials, s.channels, s.chunks, GradSums{0.0f, 0.0f},
      [](unsigned int, const float(&partial)[2]) {
        return GradSums{partial[0], partial[1]};
      },
      add_sums,
      [&](std::int64_t c, const GradSums& sums) { finish_backward(o, c, sums.dy, sums.dy_xmu); });
}

// dx = (dy - sum_dy / M - (x - mean) * sum_dy_xmu * invstd^2 / M) * invstd * weight, dy masked,
// with each thread's channel coefficients worked out once.
template <class X, class D, int V>
__global__ void nhwc_backward_dx_kernel(const X* x, const D* dy, ReluMask mask, X* dx, RowSplit s,
                                        const float* mean, const float* invstd, ChannelData weight,
                                        const float* sum_dy, const float* sum_dy_xmu, Width<V>) {
  constexpr int U = kBatch<V>;
  const unsigned int group = row_group();
  if (group >= s.groups) return;
  const float count = static_cast<float>(s.rows);
  float k_c[V], mean_dy[V], a[V], m[V];
  for (int k = 0; k < V; ++k) {
    const std::int64_t c = std::int64_t{group} * V + k;
    k_c[k] = sum_dy_xmu[c] * invstd[c] * invstd[c] / count;
    mean_dy[k] = sum_dy[c] / count;
    a[k] = invstd[c] * load_any(weight.data, weight.dtype, c);
    m[k] = mean[c];
  }
  for_row_vectors<V, U>(s, blockIdx.x, group, [&](const std::int64_t(&at)[U], unsigned int used) {
    float xv[U][V], g[U][V];
    for (int u = 0; u < U; ++u)
      load_pack<V>(x, at[u], xv[u]);
    load_grads<V>(dy, mask, at, g);
    for (unsigned int u = 0; u < used; ++u) {
      for (int k = 0; k < V; ++k)
        xv[u][k] = (g[u][k] - mean_dy[k] - (xv[u][k] - m[k]) * k_c[k]) * a[k];
      store_pack<V>(dx, at[u], xv[u]);
    }
  });
}

std::int64_t rows_of(const BatchNormGeometry& g) {
  return g.batch * g.plane;
}

RowSplit reduction_split(const BatchNormGeometry& g, int width) {
  return split_rows(rows_of(g), g.channels, width, kRowReduceThreads, 4, kReduceBlocks,
                    kReduceBlocks, "batch_norm2d (nhwc)");
}

// One batch of U = kBatch<width> rows per thread: many short blocks, so the last wave is short.
RowSplit map_split(const BatchNormGeometry& g, int width) {
  const int rows_per_thread = width == 8 ? kBatch<8> : width == 4 ? kBatch<4> : kBatch<1>;
  constexpr std::int64_t kUnbounded = std::int64_t{1} << 31;  // rows < 2^31 bound the chunks
  return split_rows(rows_of(g), g.channels, width, kThreads, rows_per_thread, kUnbounded,
                    kUnbounded, "batch_norm2d (nhwc)");
}

// Partials for a split of more than one chunk: two floats per (chunk, channel).
DeviceBuffer partials_for(const RowSplit& s) {
  return s.chunks > 1 ? reduction_workspace(2 * sizeof(float) * s.chunks * s.channels)
                      : DeviceBuffer();
}

template <class T>
void launch_affine(const void* x, void* y, const BatchNormGeometry& g, const float* scale,
                   const float* shift, bool relu, cudaStream_t stream) {
  if (rows_of(g) == 0) return;
  const int width =
      plane_vector_width(g.channels, 16 / sizeof(T), {{x, sizeof(T)}, {y, sizeof(T)}});
  const RowSplit split = map_split(g, width);
  dispatch_width<16 / sizeof(T)>(width, [&](auto v) {
    ALLOY_LAUNCH(nhwc_affine_kernel, row_grid(split), row_block(split), 0, stream)
    (static_cast<const T*>(x), static_cast<T*>(y), split, scale, shift, relu, v);
  });
  ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d nhwc_affine_kernel over ", split.rows, " rows of ",
                          g.channels, " channels in ", width, "-value vectors");
}

}  // namespace

void batch_norm2d_nhwc_train_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                                     ChannelData weight, ChannelData bias, ChannelData running_mean,
                                     ChannelData running_var, const BatchNormParams& params,
                                     float* saved_mean, float* saved_invstd, float* scratch,
                                     void* y, cudaStream_t stream) {
  const TrainOutputs outputs = train_outputs(g, weight, bias, running_mean, running_var, params,
                                             saved_mean, saved_invstd, scratch);
  dispatch_floating(dtype, "batch_norm2d_train_forward", [&](auto type) {
    using T = decltype(type);
    const int width = plane_vector_width(g.channels, 16 / sizeof(T), {{x, sizeof(T)}});
    const RowSplit split = reduction_split(g, width);
    const DeviceBuffer partials = partials_for(split);
    dispatch_width<16 / sizeof(T)>(width, [&](auto v) {
      ALLOY_LAUNCH(nhwc_statistics_kernel, row_grid(split), row_block(split), 0, stream)
      (static_cast<const T*>(x), split, outputs, partials.as<float>(), v);
    });
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d nhwc_statistics_kernel over ", split.rows, " rows of ",
                            g.channels, " channels in ", split.chunks, " chunks of ", width,
                            "-value vectors");
    if (split.chunks > 1) {
      ALLOY_LAUNCH(nhwc_statistics_merge_kernel, merge_blocks(g.channels), kRowReduceThreads, 0,
                   stream)
      (partials.as<float>(), split, outputs);
      ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d nhwc_statistics_merge_kernel over ", split.chunks,
                              " chunks of ", g.channels, " channels");
    }
    launch_affine<T>(x, y, g, outputs.scale, outputs.shift, params.relu, stream);
  });
}

void batch_norm2d_nhwc_eval_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                                    ChannelData weight, ChannelData bias, ChannelData running_mean,
                                    ChannelData running_var, const BatchNormParams& params,
                                    float* scratch, void* y, cudaStream_t stream) {
  batch_norm_eval_forward(
      x, dtype, g, weight, bias, running_mean, running_var, params, scratch, y, stream,
      [](auto type, auto&&... args) { launch_affine<decltype(type)>(args...); });
}

void batch_norm2d_nhwc_backward(const void* x, DType dtype, const void* dy, DType dy_dtype,
                                ReluMask mask, const BatchNormGeometry& g, ChannelData weight,
                                const float* saved_mean, const float* saved_invstd,
                                ChannelData dweight, ChannelData dbias, float* scratch, void* dx,
                                cudaStream_t stream) {
  float* sum_dy = scratch;
  float* sum_dy_xmu = scratch + g.channels;
  dispatch_floating_pair(dtype, dy_dtype, "batch_norm2d_backward", [&](auto x_type, auto d_type) {
    using X = decltype(x_type);
    using D = decltype(d_type);
    // dx is x's dtype: x's element size sets the widest vector.
    const int width =
        plane_vector_width(g.channels, 16 / sizeof(X),
                           {{x, sizeof(X)},
                            {dy, sizeof(D)},
                            {dx, sizeof(X)},
                            {mask.data, mask.data == nullptr ? 1 : dtype_size(mask.dtype)}});
    const RowSplit split = reduction_split(g, width);
    const DeviceBuffer partials = partials_for(split);
    const BackwardOutputs outputs{saved_invstd, dweight, dbias, sum_dy, sum_dy_xmu};
    dispatch_width<16 / sizeof(X)>(width, [&](auto v) {
      ALLOY_LAUNCH(nhwc_backward_reduce_kernel, row_grid(split), row_block(split), 0, stream)
      (static_cast<const X*>(x), static_cast<const D*>(dy), mask, split, saved_mean, outputs,
       partials.as<float>(), v);
    });
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d nhwc_backward_reduce_kernel over ", split.rows,
                            " rows of ", g.channels, " channels in ", split.chunks, " chunks of ",
                            width, "-value vectors");
    if (split.chunks > 1) {
      ALLOY_LAUNCH(nhwc_backward_merge_kernel, merge_blocks(g.channels), kRowReduceThreads, 0,
                   stream)
      (partials.as<float>(), split, outputs);
      ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d nhwc_backward_merge_kernel over ", split.chunks,
                              " chunks of ", g.channels, " channels");
    }
    if (rows_of(g) == 0) return;
    const RowSplit map = map_split(g, width);
    dispatch_width<16 / sizeof(X)>(width, [&](auto v) {
      ALLOY_LAUNCH(nhwc_backward_dx_kernel, row_grid(map), row_block(map), 0, stream)
      (static_cast<const X*>(x), static_cast<const D*>(dy), mask, static_cast<X*>(dx), map,
       saved_mean, saved_invstd, weight, sum_dy, sum_dy_xmu, v);
    });
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d nhwc_backward_dx_kernel over ", map.rows, " rows of ",
                            g.channels, " channels in ", width, "-value vectors");
  });
}

}  // namespace alloy::cuda
