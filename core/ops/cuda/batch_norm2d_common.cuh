// The pieces batch norm's NCHW and NHWC CUDA kernels share, so that both layouts form invstd,
// the running statistics, the parameter gradients and the masked dy with the same fp32
// arithmetic (only the order of the sums differs).
#pragma once

#include <cstdint>

#include "core/ops/cuda/batch_norm2d.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/plane_vectors.cuh"

namespace alloy::cuda {

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
__device__ __forceinline__ void finish_statistics(const TrainOutputs& o, std::int64_t c,
                                                  float count, float mean, float squares) {
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

// A chunk's (or several chunks') count, mean and sum of squared deviations from that mean.
struct Moments {
  float count, mean, squares;
};

// a and b merged (Chan et al.'s pairwise update); exact when a is {0, 0, 0}.
__device__ __forceinline__ Moments merge_moments(const Moments& a, const Moments& b) {
  const float n = a.count + b.count;
  const float delta = b.mean - a.mean;
  return {n, a.mean + delta * (b.count / n),
          a.squares + (b.squares + delta * delta * (a.count * b.count / n))};
}

// The outputs of a training forward, with scale and shift in scratch (f32 [2C]).
inline TrainOutputs train_outputs(const BatchNormGeometry& g, ChannelData weight, ChannelData bias,
                                  ChannelData running_mean, ChannelData running_var,
                                  const BatchNormParams& params, float* saved_mean,
                                  float* saved_invstd, float* scratch) {
  return {weight,
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
}

struct BackwardOutputs {
  const float* invstd;
  ChannelData dweight, dbias;
  float* sum_dy;
  float* sum_dy_xmu;
};

__device__ __forceinline__ void finish_backward(const BackwardOutputs& o, std::int64_t c,
                                                float total_dy, float total_dy_xmu) {
  o.sum_dy[c] = total_dy;
  o.sum_dy_xmu[c] = total_dy_xmu;
  store_any(o.dweight.data, o.dweight.dtype, c,
            load_any(o.dweight.data, o.dweight.dtype, c) + total_dy_xmu * o.invstd[c]);
  store_any(o.dbias.data, o.dbias.dtype, c, load_any(o.dbias.data, o.dbias.dtype, c) + total_dy);
}

// dy's vectors at[u], zero where the mask is not positive (NaN included), if there is one: what
// relu_backward passes on. The mask's loads follow dy's, before any is used.
template <int V, int U, class D>
__device__ __forceinline__ void load_grads(const D* dy, ReluMask mask, const std::int64_t (&at)[U],
                                           float (&g)[U][V]) {
  for (int u = 0; u < U; ++u)
    load_pack<V>(dy, at[u], g[u]);
  if (mask.data == nullptr) return;
  float m[U][V];
  for (int u = 0; u < U; ++u)
    load_pack_any<V>(mask.data, mask.dtype, at[u], m[u]);
  for (int u = 0; u < U; ++u) {
    for (int k = 0; k < V; ++k)
      g[u][k] = m[u][k] > 0.0f ? g[u][k] : 0.0f;
  }
}

// The evaluation forward of either layout: the running statistics' scale and shift into
// scratch, then the layout's affine map, affine(T{}, x, y, g, scale, shift, relu, stream) with T
// the storage type.
template <class Affine>
void batch_norm_eval_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                             ChannelData weight, ChannelData bias, ChannelData running_mean,
                             ChannelData running_var, const BatchNormParams& params, float* scratch,
                             void* y, cudaStream_t stream, Affine&& affine) {
  float* scale = scratch;
  float* shift = scratch + g.channels;
  batch_norm2d_eval_coefficients(g.channels, weight, bias, running_mean, running_var, params.eps,
                                 scale, shift, stream);
  dispatch_floating(dtype, "batch_norm2d_eval_forward",
                    [&](auto type) { affine(type, x, y, g, scale, shift, params.relu, stream); });
}

}  // namespace alloy::cuda
