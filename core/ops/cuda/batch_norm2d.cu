#include "core/ops/cuda/batch_norm2d.h"
#include "core/ops/cuda/batch_norm2d_common.cuh"
#include "core/ops/cuda/channel_reduce.cuh"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"

namespace alloy::cuda {

namespace {

// One block per (chunk, channel) (channel_reduce.cuh): the chunk's mean and sum of squared
// deviations from it, in two passes like the CPU twin (the second reads the chunk again, from
// the cache). A channel of one chunk is finished by its block; otherwise the grid's last block
// merges each channel's chunks in chunk order (Chan et al.'s pairwise update), so the
// statistics stay deterministic.
template <class T, int V>
__global__ void train_statistics_kernel(const T* x, ChannelSplit s, TrainOutputs o, float* partials,
                                        unsigned int* arrivals, Width<V>) {
  constexpr int U = kWideBatch<V>;
  const unsigned int chunk = blockIdx.x;
  const std::int64_t c = blockIdx.y;
  const float count = static_cast<float>(chunk_count(s, chunk));
  __shared__ float mean_shared;
  float total = 0.0f;
  for_chunk_values<V, U>(x, s, chunk, c, [&](float value) { total += value; });
  total = block_sum(total);
  if (threadIdx.x == 0) mean_shared = total / count;
  __syncthreads();
  const float mean = mean_shared;
  float squares = 0.0f;
  for_chunk_values<V, U>(x, s, chunk, c, [&](float value) {
    const float d = value - mean;
    squares += d * d;
  });
  squares = block_sum(squares);
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) finish_statistics(o, c, count, mean, squares);
    return;
  }
  if (threadIdx.x == 0) {
    partials[2 * (c * gridDim.x + chunk)] = mean;
    partials[2 * (c * gridDim.x + chunk) + 1] = squares;
  }
  if (!arrive_last(arrivals)) return;
  for (std::int64_t channel = threadIdx.x; channel < s.channels; channel += blockDim.x) {
    Moments merged{0.0f, 0.0f, 0.0f};
    for_channel_partials<2>(partials, channel, [&](unsigned int k, const float(&partial)[2]) {
      merged =
          merge_moments(merged, {static_cast<float>(chunk_count(s, k)), partial[0], partial[1]});
    });
    finish_statistics(o, channel, merged.count, merged.mean, merged.squares);
  }
}

// One block per (chunk, channel), which reads its channel's scale and shift once. With relu,
// max(0, .) before the one rounding: the bits relu_forward gives after it.
template <class T, int V>
__global__ void affine_kernel(const T* x, T* y, ChannelSplit s, const float* scale,
                              const float* shift, bool relu, Width<V>) {
  constexpr int U = kBatch<V>;
  const std::int64_t c = blockIdx.y;
  const float a = scale[c];
  const float b = shift[c];
  for_chunk_vectors<V, U>(s, blockIdx.x, c, [&](const std::int64_t(&at)[U], unsigned int used) {
    float v[U][V];
    for (int u = 0; u < U; ++u)
      load_pack<V>(x, at[u], v[u]);
    for (unsigned int u = 0; u < used; ++u) {
      for (int k = 0; k < V; ++k) {
        const float r = v[u][k] * a + b;
        v[u][k] = relu && r <= 0.0f ? 0.0f : r;
      }
      store_pack<V>(y, at[u], v[u]);
    }
  });
}

// Per channel: sum dy and sum dy (x - mean), both in one pass, one block per (chunk, channel);
// several chunks are summed in chunk order by the grid's last block.
template <class X, class D, int V>
__global__ void backward_reduce_kernel(const X* x, const D* dy, ReluMask mask, ChannelSplit s,
                                       const float* mean, BackwardOutputs o, float* partials,
                                       unsigned int* arrivals, Width<V>) {
  constexpr int U = kBatch<V>;
  const unsigned int chunk = blockIdx.x;
  const std::int64_t c = blockIdx.y;
  const float m = mean[c];
  float total_dy = 0.0f, total_dy_xmu = 0.0f;
  for_chunk_vectors<V, U>(s, chunk, c, [&](const std::int64_t(&at)[U], unsigned int used) {
    float xv[U][V], g[U][V];
    for (int u = 0; u < U; ++u)
      load_pack<V>(x, at[u], xv[u]);
    load_grads<V>(dy, mask, at, g);
    for (unsigned int u = 0; u < used; ++u) {
      for (int k = 0; k < V; ++k) {
        total_dy += g[u][k];
        total_dy_xmu += g[u][k] * (xv[u][k] - m);
      }
    }
  });
  total_dy = block_sum(total_dy);
  total_dy_xmu = block_sum(total_dy_xmu);
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) finish_backward(o, c, total_dy, total_dy_xmu);
    return;
  }
  if (threadIdx.x == 0) {
    partials[2 * (c * gridDim.x + chunk)] = total_dy;
    partials[2 * (c * gridDim.x + chunk) + 1] = total_dy_xmu;
  }
  if (!arrive_last(arrivals)) return;
  for (std::int64_t channel = threadIdx.x; channel < s.channels; channel += blockDim.x) {
    float sum_dy = 0.0f, sum_dy_xmu = 0.0f;
    for_channel_partials<2>(partials, channel, [&](unsigned int, const float(&partial)[2]) {
      sum_dy += partial[0];
      sum_dy_xmu += partial[1];
    });
    finish_backward(o, channel, sum_dy, sum_dy_xmu);
  }
}

// One block per (chunk, channel), which works out its channel's coefficients once.
template <class X, class D, int V>
__global__ void backward_dx_kernel(const X* x, const D* dy, ReluMask mask, X* dx, ChannelSplit s,
                                   const float* mean, const float* invstd, ChannelData weight,
                                   const float* sum_dy, const float* sum_dy_xmu, Width<V>) {
  constexpr int U = kBatch<V>;
  const std::int64_t c = blockIdx.y;
  const float count = static_cast<float>(s.batch * s.plane);
  const float k_c = sum_dy_xmu[c] * invstd[c] * invstd[c] / count;
  const float mean_dy = sum_dy[c] / count;
  const float a = invstd[c] * load_any(weight.data, weight.dtype, c);
  const float m = mean[c];
  for_chunk_vectors<V, U>(s, blockIdx.x, c, [&](const std::int64_t(&at)[U], unsigned int used) {
    float xv[U][V], g[U][V];
    for (int u = 0; u < U; ++u)
      load_pack<V>(x, at[u], xv[u]);
    load_grads<V>(dy, mask, at, g);
    for (unsigned int u = 0; u < used; ++u) {
      for (int k = 0; k < V; ++k)
        xv[u][k] = (g[u][k] - mean_dy - (xv[u][k] - m) * k_c) * a;
      store_pack<V>(dx, at[u], xv[u]);
    }
  });
}

ChannelSplit split_of(const BatchNormGeometry& g) {
  return split_for_reduction(g.batch, g.channels, g.plane, "batch_norm2d");
}

// Partials for a split of more than one chunk: two floats per (chunk, channel).
DeviceBuffer partials_for(const ChannelSplit& s) {
  return s.chunks > 1 ? reduction_workspace(2 * sizeof(float) * s.chunks * s.channels)
                      : DeviceBuffer();
}

unsigned int* arrivals_for(const ChannelSplit& s) {
  return s.chunks > 1 ? arrival_counter(ArrivalSlot::channel_sums) : nullptr;
}

__global__ void eval_coefficients_kernel(std::int64_t channels, ChannelData weight,
                                         ChannelData bias, ChannelData running_mean,
                                         ChannelData running_var, float eps, float* scale,
                                         float* shift) {
  ALLOY_GRID_STRIDE(c, channels) {
    const float invstd = 1.0f / sqrtf(load_any(running_var.data, running_var.dtype, c) + eps);
    const float a = load_any(weight.data, weight.dtype, c) * invstd;
    scale[c] = a;
    shift[c] =
        load_any(bias.data, bias.dtype, c) - load_any(running_mean.data, running_mean.dtype, c) * a;
  }
}

template <class T>
void launch_affine(const void* x, void* y, const BatchNormGeometry& g, const float* scale,
                   const float* shift, bool relu, cudaStream_t stream) {
  if (g.batch * g.channels * g.plane == 0) return;
  const int width = plane_vector_width(g.plane, 16 / sizeof(T), {{x, sizeof(T)}, {y, sizeof(T)}});
  const ChannelSplit split = split_for_map(g.batch, g.channels, g.plane, width, "batch_norm2d");
  dispatch_width<16 / sizeof(T)>(width, [&](auto v) {
    ALLOY_LAUNCH(affine_kernel, channel_grid(split), kThreads, 0, stream)
    (static_cast<const T*>(x), static_cast<T*>(y), split, scale, shift, relu, v);
  });
  ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d affine_kernel over ", g.channels, " channels in ",
                          split.chunks, " chunks of ", width, "-value vectors");
}

}  // namespace

void batch_norm2d_train_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                                ChannelData weight, ChannelData bias, ChannelData running_mean,
                                ChannelData running_var, const BatchNormParams& params,
                                float* saved_mean, float* saved_invstd, float* scratch, void* y,
                                cudaStream_t stream) {
  const ChannelSplit split = split_of(g);
  const TrainOutputs outputs = train_outputs(g, weight, bias, running_mean, running_var, params,
                                             saved_mean, saved_invstd, scratch);
  const DeviceBuffer partials = partials_for(split);
  unsigned int* arrivals = arrivals_for(split);
  dispatch_floating(dtype, "batch_norm2d_train_forward", [&](auto type) {
    using T = decltype(type);
    const int width = plane_vector_width(g.plane, 16 / sizeof(T), {{x, sizeof(T)}});
    dispatch_width<16 / sizeof(T)>(width, [&](auto v) {
      ALLOY_LAUNCH(train_statistics_kernel, channel_grid(split), kThreads, 0, stream)
      (static_cast<const T*>(x), split, outputs, partials.as<float>(), arrivals, v);
    });
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d train_statistics_kernel over ", g.channels,
                            " channels in ", split.chunks, " chunks of ", width, "-value vectors");
    launch_affine<T>(x, y, g, outputs.scale, outputs.shift, params.relu, stream);
  });
}

void batch_norm2d_eval_coefficients(std::int64_t channels, ChannelData weight, ChannelData bias,
                                    ChannelData running_mean, ChannelData running_var, float eps,
                                    float* scale, float* shift, cudaStream_t stream) {
  ALLOY_LAUNCH(eval_coefficients_kernel, grid_for(channels), kThreads, 0, stream)
  (channels, weight, bias, running_mean, running_var, eps, scale, shift);
  ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d eval_coefficients_kernel over ", channels, " channels");
}

void batch_norm2d_eval_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                               ChannelData weight, ChannelData bias, ChannelData running_mean,
                               ChannelData running_var, const BatchNormParams& params,
                               float* scratch, void* y, cudaStream_t stream) {
  batch_norm_eval_forward(
      x, dtype, g, weight, bias, running_mean, running_var, params, scratch, y, stream,
      [](auto type, auto&&... args) { launch_affine<decltype(type)>(args...); });
}

void batch_norm2d_backward(const void* x, DType dtype, const void* dy, DType dy_dtype,
                           ReluMask mask, const BatchNormGeometry& g, ChannelData weight,
                           const float* saved_mean, const float* saved_invstd, ChannelData dweight,
                           ChannelData dbias, float* scratch, void* dx, cudaStream_t stream) {
  float* sum_dy = scratch;
  float* sum_dy_xmu = scratch + g.channels;
  const ChannelSplit split = split_of(g);
  const DeviceBuffer partials = partials_for(split);
  unsigned int* arrivals = arrivals_for(split);
  dispatch_floating_pair(dtype, dy_dtype, "batch_norm2d_backward", [&](auto x_type, auto d_type) {
    using X = decltype(x_type);
    using D = decltype(d_type);
    // dx is x's dtype: x's element size sets the widest vector.
    const int width =
        plane_vector_width(g.plane, 16 / sizeof(X),
                           {{x, sizeof(X)},
                            {dy, sizeof(D)},
                            {dx, sizeof(X)},
                            {mask.data, mask.data == nullptr ? 1 : dtype_size(mask.dtype)}});
    dispatch_width<16 / sizeof(X)>(width, [&](auto v) {
      ALLOY_LAUNCH(backward_reduce_kernel, channel_grid(split), kThreads, 0, stream)
      (static_cast<const X*>(x), static_cast<const D*>(dy), mask, split, saved_mean,
       BackwardOutputs{saved_invstd, dweight, dbias, sum_dy, sum_dy_xmu}, partials.as<float>(),
       arrivals, v);
    });
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d backward_reduce_kernel over ", g.channels,
                            " channels in ", split.chunks, " chunks of ", width, "-value vectors");
    if (g.batch * g.channels * g.plane == 0) return;
    const ChannelSplit map = split_for_map(g.batch, g.channels, g.plane, width, "batch_norm2d");
    dispatch_width<16 / sizeof(X)>(width, [&](auto v) {
      ALLOY_LAUNCH(backward_dx_kernel, channel_grid(map), kThreads, 0, stream)
      (static_cast<const X*>(x), static_cast<const D*>(dy), mask, static_cast<X*>(dx), map,
       saved_mean, saved_invstd, weight, sum_dy, sum_dy_xmu, v);
    });
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d backward_dx_kernel over ", g.channels, " channels in ",
                            map.chunks, " chunks of ", width, "-value vectors");
  });
}

}  // namespace alloy::cuda
