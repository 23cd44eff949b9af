#include "core/ops/cuda/batch_norm2d.h"
#include "core/ops/cuda/channel_reduce.cuh"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"

namespace alloy::cuda {

namespace {

struct Shape3 {
  std::int64_t batch, channels, plane;
};

struct TrainOutputs {
  ChannelData weight, bias, running_mean, running_var;
  float momentum, eps;
  bool update_running;
  float* saved_mean;
  float* saved_invstd;
  float* scale;
  float* shift;
};

// Channel c's saved statistics, the running statistics' update and the affine map's scale and
// shift, from its mean and its sum of squared deviations.
__device__ void finish_statistics(const TrainOutputs& o, std::int64_t c, float count, float mean,
                                  float squares) {
  const float variance = squares / count;
  const float invstd = 1.0f / sqrtf(variance + o.eps);
  o.saved_mean[c] = mean;
  o.saved_invstd[c] = invstd;
  const float a = load_any(o.weight.data, o.weight.dtype, c) * invstd;
  o.scale[c] = a;
  o.shift[c] = load_any(o.bias.data, o.bias.dtype, c) - mean * a;
  if (!o.update_running) return;
  const float keep = 1.0f - o.momentum;
  const float unbiased = variance * (count / (count - 1.0f));
  store_any(o.running_mean.data, o.running_mean.dtype, c,
            keep * load_any(o.running_mean.data, o.running_mean.dtype, c) + o.momentum * mean);
  store_any(o.running_var.data, o.running_var.dtype, c,
            keep * load_any(o.running_var.data, o.running_var.dtype, c) + o.momentum * unbiased);
}

// One block per (chunk, channel) (channel_reduce.cuh): the chunk's mean and sum of squared
// deviations from it, in two passes like the CPU twin. A channel of one chunk is finished by
// its block; otherwise the grid's last block merges each channel's chunks in chunk order
// (Chan et al.'s pairwise update), so the statistics stay deterministic.
template <class T>
__global__ void train_statistics_kernel(const T* x, ChannelSplit s, TrainOutputs o, float* partials,
                                        unsigned int* arrivals) {
  const unsigned int chunk = blockIdx.x;
  const std::int64_t c = blockIdx.y;
  const float count = static_cast<float>(chunk_count(s, chunk));
  __shared__ float mean_shared;
  const float total = chunk_sum(
      s, chunk, [&](unsigned int n, unsigned int p) { return widen(x[channel_at(s, n, c, p)]); });
  if (threadIdx.x == 0) mean_shared = total / count;
  __syncthreads();
  const float mean = mean_shared;
  const float squares = chunk_sum(s, chunk, [&](unsigned int n, unsigned int p) {
    const float d = widen(x[channel_at(s, n, c, p)]) - mean;
    return d * d;
  });
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
    float n_a = 0.0f, mean_a = 0.0f, squares_a = 0.0f;
    for (unsigned int k = 0; k < gridDim.x; ++k) {
      const float n_b = static_cast<float>(chunk_count(s, k));
      const float mean_b = __ldcg(partials + 2 * (channel * gridDim.x + k));
      const float squares_b = __ldcg(partials + 2 * (channel * gridDim.x + k) + 1);
      const float n = n_a + n_b;
      const float delta = mean_b - mean_a;
      mean_a += delta * (n_b / n);
      squares_a += squares_b + delta * delta * (n_a * n_b / n);
      n_a = n;
    }
    finish_statistics(o, channel, n_a, mean_a, squares_a);
  }
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

// With relu, max(0, .) before the one rounding: the bits relu_forward gives after it.
template <class T>
__global__ void affine_kernel(const T* x, T* y, Shape3 s, const float* scale, const float* shift,
                              bool relu) {
  ALLOY_GRID_STRIDE(i, s.batch * s.channels * s.plane) {
    const std::int64_t c = (i / s.plane) % s.channels;
    const float v = widen(x[i]) * scale[c] + shift[c];
    y[i] = narrow<T>(relu && v <= 0.0f ? 0.0f : v);
  }
}

// dy[i] where the mask is positive (or there is none), else 0: what relu_backward passes on.
template <class D>
__device__ __forceinline__ float masked_grad(const D* dy, ReluMask mask, std::int64_t i) {
  return mask.data == nullptr || load_any(mask.data, mask.dtype, i) > 0.0f ? widen(dy[i]) : 0.0f;
}

struct BackwardOutputs {
  const float* invstd;
  ChannelData dweight, dbias;
  float* sum_dy;
  float* sum_dy_xmu;
};

__device__ void finish_backward(const BackwardOutputs& o, std::int64_t c, float total_dy,
                                float total_dy_xmu) {
  o.sum_dy[c] = total_dy;
  o.sum_dy_xmu[c] = total_dy_xmu;
  store_any(o.dweight.data, o.dweight.dtype, c,
            load_any(o.dweight.data, o.dweight.dtype, c) + total_dy_xmu * o.invstd[c]);
  store_any(o.dbias.data, o.dbias.dtype, c, load_any(o.dbias.data, o.dbias.dtype, c) + total_dy);
}

// Per channel: sum dy and sum dy (x - mean), one block per (chunk, channel); several chunks are
// summed in chunk order by the grid's last block.
template <class X, class D>
__global__ void backward_reduce_kernel(const X* x, const D* dy, ReluMask mask, ChannelSplit s,
                                       const float* mean, BackwardOutputs o, float* partials,
                                       unsigned int* arrivals) {
  const unsigned int chunk = blockIdx.x;
  const std::int64_t c = blockIdx.y;
  const float m = mean[c];
  const float total_dy = chunk_sum(s, chunk, [&](unsigned int n, unsigned int p) {
    return masked_grad(dy, mask, channel_at(s, n, c, p));
  });
  const float total_dy_xmu = chunk_sum(s, chunk, [&](unsigned int n, unsigned int p) {
    const std::int64_t at = channel_at(s, n, c, p);
    return masked_grad(dy, mask, at) * (widen(x[at]) - m);
  });
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
    for (unsigned int k = 0; k < gridDim.x; ++k) {
      sum_dy += __ldcg(partials + 2 * (channel * gridDim.x + k));
      sum_dy_xmu += __ldcg(partials + 2 * (channel * gridDim.x + k) + 1);
    }
    finish_backward(o, channel, sum_dy, sum_dy_xmu);
  }
}

template <class X, class D>
__global__ void backward_dx_kernel(const X* x, const D* dy, ReluMask mask, X* dx, Shape3 s,
                                   const float* mean, const float* invstd, ChannelData weight,
                                   const float* sum_dy, const float* sum_dy_xmu) {
  const float count = static_cast<float>(s.batch * s.plane);
  ALLOY_GRID_STRIDE(i, s.batch * s.channels * s.plane) {
    const std::int64_t c = (i / s.plane) % s.channels;
    const float k = sum_dy_xmu[c] * invstd[c] * invstd[c] / count;
    const float mean_dy = sum_dy[c] / count;
    const float a = invstd[c] * load_any(weight.data, weight.dtype, c);
    dx[i] = narrow<X>((masked_grad(dy, mask, i) - mean_dy - (widen(x[i]) - mean[c]) * k) * a);
  }
}

Shape3 shape_of(const BatchNormGeometry& g) {
  return {g.batch, g.channels, g.plane};
}

ChannelSplit split_of(const BatchNormGeometry& g) {
  return split_channels(g.batch, g.channels, g.plane, "batch_norm2d");
}

// Partials for a split of more than one chunk: two floats per (chunk, channel).
DeviceBuffer partials_for(const ChannelSplit& s) {
  return s.chunks > 1 ? reduction_workspace(2 * sizeof(float) * s.chunks * s.channels)
                      : DeviceBuffer();
}

unsigned int* arrivals_for(const ChannelSplit& s, cudaStream_t stream) {
  return s.chunks > 1 ? arrival_counter(ArrivalSlot::channel_sums, stream) : nullptr;
}

template <class T>
void launch_affine(const void* x, void* y, const Shape3& s, const float* scale, const float* shift,
                   bool relu, cudaStream_t stream) {
  const std::int64_t count = s.batch * s.channels * s.plane;
  if (count == 0) return;
  ALLOY_LAUNCH(affine_kernel, grid_for(count), kThreads, 0, stream)
  (static_cast<const T*>(x), static_cast<T*>(y), s, scale, shift, relu);
  ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d affine_kernel on ", count, " elements");
}

}  // namespace

void batch_norm2d_train_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                                ChannelData weight, ChannelData bias, ChannelData running_mean,
                                ChannelData running_var, const BatchNormParams& params,
                                float* saved_mean, float* saved_invstd, float* scratch, void* y,
                                cudaStream_t stream) {
  const Shape3 s = shape_of(g);
  const ChannelSplit split = split_of(g);
  const TrainOutputs outputs{weight,
                             bias,
                             running_mean,
                             running_var,
                             params.momentum,
                             params.eps,
                             params.update_running_statistics,
                             saved_mean,
                             saved_invstd,
                             scratch,
                             scratch + g.channels};
  const DeviceBuffer partials = partials_for(split);
  unsigned int* arrivals = arrivals_for(split, stream);
  dispatch_floating(dtype, "batch_norm2d_train_forward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(train_statistics_kernel, channel_grid(split), kThreads, 0, stream)
    (static_cast<const T*>(x), split, outputs, partials.as<float>(), arrivals);
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d train_statistics_kernel over ", g.channels,
                            " channels in ", split.chunks, " chunks");
    launch_affine<T>(x, y, s, outputs.scale, outputs.shift, params.relu, stream);
  });
}

void batch_norm2d_eval_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                               ChannelData weight, ChannelData bias, ChannelData running_mean,
                               ChannelData running_var, const BatchNormParams& params,
                               float* scratch, void* y, cudaStream_t stream) {
  const Shape3 s = shape_of(g);
  float* scale = scratch;
  float* shift = scratch + g.channels;
  ALLOY_LAUNCH(eval_coefficients_kernel, grid_for(g.channels), kThreads, 0, stream)
  (g.channels, weight, bias, running_mean, running_var, params.eps, scale, shift);
  ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d eval_coefficients_kernel over ", g.channels, " channels");
  dispatch_floating(dtype, "batch_norm2d_eval_forward", [&](auto type) {
    using T = decltype(type);
    launch_affine<T>(x, y, s, scale, shift, params.relu, stream);
  });
}

void batch_norm2d_backward(const void* x, DType dtype, const void* dy, DType dy_dtype,
                           ReluMask mask, const BatchNormGeometry& g, ChannelData weight,
                           const float* saved_mean, const float* saved_invstd, ChannelData dweight,
                           ChannelData dbias, float* scratch, void* dx, cudaStream_t stream) {
  const Shape3 s = shape_of(g);
  float* sum_dy = scratch;
  float* sum_dy_xmu = scratch + g.channels;
  const std::int64_t count = s.batch * s.channels * s.plane;
  const ChannelSplit split = split_of(g);
  const DeviceBuffer partials = partials_for(split);
  unsigned int* arrivals = arrivals_for(split, stream);
  dispatch_floating_pair(dtype, dy_dtype, "batch_norm2d_backward", [&](auto x_type, auto d_type) {
    using X = decltype(x_type);
    using D = decltype(d_type);
    ALLOY_LAUNCH(backward_reduce_kernel, channel_grid(split), kThreads, 0, stream)
    (static_cast<const X*>(x), static_cast<const D*>(dy), mask, split, saved_mean,
     BackwardOutputs{saved_invstd, dweight, dbias, sum_dy, sum_dy_xmu}, partials.as<float>(),
     arrivals);
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d backward_reduce_kernel over ", g.channels,
                            " channels in ", split.chunks, " chunks");
    if (count == 0) return;
    ALLOY_LAUNCH(backward_dx_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const X*>(x), static_cast<const D*>(dy), mask, static_cast<X*>(dx), s, saved_mean,
     saved_invstd, weight, sum_dy, sum_dy_xmu);
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d backward_dx_kernel on ", count, " elements");
  });
}

}  // namespace alloy::cuda
