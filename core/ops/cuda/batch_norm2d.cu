#include "core/ops/cuda/batch_norm2d.h"
#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

namespace {

struct Shape3 {
  std::int64_t batch, channels, plane;
};

// Sum over channel c's (n, i) values of f(n, i), by the whole block; valid in thread 0.
template <class F>
__device__ float channel_sum(const Shape3& s, F f) {
  float sum = 0.0f;
  for (std::int64_t n = 0; n < s.batch; ++n) {
    for (std::int64_t i = threadIdx.x; i < s.plane; i += blockDim.x)
      sum += f(n, i);
  }
  return block_sum(sum);
}

// One block per channel: mean, biased variance (two passes), saved statistics, the running
// statistics' update and the affine map's scale and shift.
template <class T>
__global__ void train_statistics_kernel(const T* x, Shape3 s, ChannelData weight, ChannelData bias,
                                        ChannelData running_mean, ChannelData running_var,
                                        float momentum, float eps, float* saved_mean,
                                        float* saved_invstd, float* scale, float* shift) {
  const std::int64_t c = blockIdx.x;
  const T* base = x + c * s.plane;
  const std::int64_t stride = s.channels * s.plane;
  const float count = static_cast<float>(s.batch * s.plane);
  __shared__ float mean_shared;
  const float total =
      channel_sum(s, [&](std::int64_t n, std::int64_t i) { return widen(base[n * stride + i]); });
  if (threadIdx.x == 0) mean_shared = total / count;
  __syncthreads();
  const float mean = mean_shared;
  const float squares = channel_sum(s, [&](std::int64_t n, std::int64_t i) {
    const float d = widen(base[n * stride + i]) - mean;
    return d * d;
  });
  if (threadIdx.x != 0) return;
  const float variance = squares / count;
  const float invstd = 1.0f / sqrtf(variance + eps);
  saved_mean[c] = mean;
  saved_invstd[c] = invstd;
  const float a = load_any(weight.data, weight.dtype, c) * invstd;
  scale[c] = a;
  shift[c] = load_any(bias.data, bias.dtype, c) - mean * a;
  const float keep = 1.0f - momentum;
  const float unbiased = variance * (count / (count - 1.0f));
  store_any(running_mean.data, running_mean.dtype, c,
            keep * load_any(running_mean.data, running_mean.dtype, c) + momentum * mean);
  store_any(running_var.data, running_var.dtype, c,
            keep * load_any(running_var.data, running_var.dtype, c) + momentum * unbiased);
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
__global__ void affine_kernel(const T* x, T* y, Shape3 s, const float* scale, const float* shift) {
  ALLOY_GRID_STRIDE(i, s.batch * s.channels * s.plane) {
    const std::int64_t c = (i / s.plane) % s.channels;
    y[i] = narrow<T>(widen(x[i]) * scale[c] + shift[c]);
  }
}

template <class X, class D>
__global__ void backward_reduce_kernel(const X* x, const D* dy, Shape3 s, const float* mean,
                                       const float* invstd, ChannelData dweight, ChannelData dbias,
                                       float* sum_dy, float* sum_dy_xmu) {
  const std::int64_t c = blockIdx.x;
  const std::int64_t offset = c * s.plane;
  const std::int64_t stride = s.channels * s.plane;
  const float m = mean[c];
  const float total_dy = channel_sum(
      s, [&](std::int64_t n, std::int64_t i) { return widen(dy[offset + n * stride + i]); });
  const float total_dy_xmu = channel_sum(s, [&](std::int64_t n, std::int64_t i) {
    const std::int64_t at = offset + n * stride + i;
    return widen(dy[at]) * (widen(x[at]) - m);
  });
  if (threadIdx.x != 0) return;
  sum_dy[c] = total_dy;
  sum_dy_xmu[c] = total_dy_xmu;
  store_any(dweight.data, dweight.dtype, c,
            load_any(dweight.data, dweight.dtype, c) + total_dy_xmu * invstd[c]);
  store_any(dbias.data, dbias.dtype, c, load_any(dbias.data, dbias.dtype, c) + total_dy);
}

template <class X, class D>
__global__ void backward_dx_kernel(const X* x, const D* dy, X* dx, Shape3 s, const float* mean,
                                   const float* invstd, ChannelData weight, const float* sum_dy,
                                   const float* sum_dy_xmu) {
  const float count = static_cast<float>(s.batch * s.plane);
  ALLOY_GRID_STRIDE(i, s.batch * s.channels * s.plane) {
    const std::int64_t c = (i / s.plane) % s.channels;
    const float k = sum_dy_xmu[c] * invstd[c] * invstd[c] / count;
    const float mean_dy = sum_dy[c] / count;
    const float a = invstd[c] * load_any(weight.data, weight.dtype, c);
    dx[i] = narrow<X>((widen(dy[i]) - mean_dy - (widen(x[i]) - mean[c]) * k) * a);
  }
}

Shape3 shape_of(const BatchNormGeometry& g) {
  return {g.batch, g.channels, g.plane};
}

unsigned int channel_blocks(const BatchNormGeometry& g) {
  ALLOY_CHECK(g.channels > 0 && g.channels <= 0x7fffffff, "batch_norm2d: ", g.channels,
              " channels do not fit one grid");
  return static_cast<unsigned int>(g.channels);
}

template <class T>
void launch_affine(const void* x, void* y, const Shape3& s, const float* scale, const float* shift,
                   cudaStream_t stream) {
  const std::int64_t count = s.batch * s.channels * s.plane;
  if (count == 0) return;
  affine_kernel<<<grid_for(count), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                          static_cast<T*>(y), s, scale, shift);
  ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d affine_kernel on ", count, " elements");
}

}  // namespace

void batch_norm2d_train_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                                ChannelData weight, ChannelData bias, ChannelData running_mean,
                                ChannelData running_var, const BatchNormParams& params,
                                float* saved_mean, float* saved_invstd, float* scratch, void* y,
                                cudaStream_t stream) {
  const Shape3 s = shape_of(g);
  float* scale = scratch;
  float* shift = scratch + g.channels;
  dispatch_floating(dtype, "batch_norm2d_train_forward", [&](auto type) {
    using T = decltype(type);
    train_statistics_kernel<<<channel_blocks(g), kThreads, 0, stream>>>(
        static_cast<const T*>(x), s, weight, bias, running_mean, running_var, params.momentum,
        params.eps, saved_mean, saved_invstd, scale, shift);
    ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d train_statistics_kernel over ", g.channels, " channels");
    launch_affine<T>(x, y, s, scale, shift, stream);
  });
}

void batch_norm2d_eval_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                               ChannelData weight, ChannelData bias, ChannelData running_mean,
                               ChannelData running_var, const BatchNormParams& params,
                               float* scratch, void* y, cudaStream_t stream) {
  const Shape3 s = shape_of(g);
  float* scale = scratch;
  float* shift = scratch + g.channels;
  eval_coefficients_kernel<<<grid_for(g.channels), kThreads, 0, stream>>>(
      g.channels, weight, bias, running_mean, running_var, params.eps, scale, shift);
  ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d eval_coefficients_kernel over ", g.channels, " channels");
  dispatch_floating(dtype, "batch_norm2d_eval_forward", [&](auto type) {
    using T = decltype(type);
    launch_affine<T>(x, y, s, scale, shift, stream);
  });
}

void batch_norm2d_backward(const void* x, DType dtype, const void* dy, DType dy_dtype,
                           const BatchNormGeometry& g, ChannelData weight, const float* saved_mean,
                           const float* saved_invstd, ChannelData dweight, ChannelData dbias,
                           float* scratch, void* dx, cudaStream_t stream) {
  const Shape3 s = shape_of(g);
  float* sum_dy = scratch;
  float* sum_dy_xmu = scratch + g.channels;
  const std::int64_t count = s.batch * s.channels * s.plane;
  dispatch_floating(dtype, "batch_norm2d_backward", [&](auto x_type) {
    using X = decltype(x_type);
    dispatch_floating(dy_dtype, "batch_norm2d_backward", [&](auto d_type) {
      using D = decltype(d_type);
      backward_reduce_kernel<<<channel_blocks(g), kThreads, 0, stream>>>(
          static_cast<const X*>(x), static_cast<const D*>(dy), s, saved_mean, saved_invstd, dweight,
          dbias, sum_dy, sum_dy_xmu);
      ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d backward_reduce_kernel over ", g.channels, " channels");
      if (count == 0) return;
      backward_dx_kernel<<<grid_for(count), kThreads, 0, stream>>>(
          static_cast<const X*>(x), static_cast<const D*>(dy), static_cast<X*>(dx), s, saved_mean,
          saved_invstd, weight, sum_dy, sum_dy_xmu);
      ALLOY_CUDA_CHECK_LAUNCH("batch_norm2d backward_dx_kernel on ", count, " elements");
    });
  });
}

}  // namespace alloy::cuda
