#include <cmath>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/optimizer_update.h"

namespace alloy::cuda {

namespace {

__device__ __forceinline__ bool skip(const float* found_inf) {
  return found_inf != nullptr && !(*found_inf == 0.0f);
}

template <class P, class G>
__global__ void sgd_kernel(P* param, const G* grad, float* buf, std::int64_t count, SgdHyper h,
                           bool first_step, const float* found_inf) {
  if (skip(found_inf)) return;
  const float damped = 1.0f - h.dampening;
  ALLOY_GRID_STRIDE(i, count) {
    float p = widen(param[i]);
    const float d = widen(grad[i]) * h.grad_scale + h.weight_decay * p;
    if (buf == nullptr) {
      p -= h.lr * d;
    } else {
      const float b = first_step ? d : h.momentum * buf[i] + damped * d;
      buf[i] = b;
      p -= h.lr * (h.nesterov ? d + h.momentum * b : b);
    }
    param[i] = narrow<P>(p);
  }
}

// The per-step scalars come from the host, computed in double as PyTorch does.
struct AdamScalars {
  float step_size, correction2_sqrt, decay, one_minus_beta1, one_minus_beta2;
};

template <class P, class G>
__global__ void adamw_kernel(P* param, const G* grad, float* m, float* v, std::int64_t count,
                             AdamWHyper h, AdamScalars s, const float* found_inf) {
  if (skip(found_inf)) return;
  ALLOY_GRID_STRIDE(i, count) {
    const float g = widen(grad[i]) * h.grad_scale;
    const float mi = m[i] + s.one_minus_beta1 * (g - m[i]);
    const float vi = h.beta2 * v[i] + s.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / s.correction2_sqrt + h.eps;
    param[i] = narrow<P>(widen(param[i]) * s.decay - s.step_size * (mi / denom));
  }
}

}  // namespace

void sgd_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                float* momentum_buffer, std::int64_t count, const SgdHyper& hyper, bool first_step,
                const float* found_inf, cudaStream_t stream) {
  if (count == 0) return;
  float* buf = hyper.momentum != 0.0f ? momentum_buffer : nullptr;
  dispatch_floating(param_dtype, "sgd_update", [&](auto p_type) {
    using P = decltype(p_type);
    dispatch_floating(grad_dtype, "sgd_update", [&](auto g_type) {
      using G = decltype(g_type);
      sgd_kernel<<<grid_for(count), kThreads, 0, stream>>>(static_cast<P*>(param),
                                                           static_cast<const G*>(grad), buf, count,
                                                           hyper, first_step, found_inf);
    });
  });
  ALLOY_CUDA_CHECK_LAUNCH("sgd_kernel on ", count, " parameters");
}

void adamw_update(void* param, DType param_dtype, const void* grad, DType grad_dtype,
                  float* exp_avg, float* exp_avg_sq, std::int64_t count, const AdamWHyper& hyper,
                  std::int64_t step, const float* found_inf, cudaStream_t stream) {
  if (count == 0) return;
  const double correction1 = 1.0 - std::pow(static_cast<double>(hyper.beta1), step);
  const double correction2 = 1.0 - std::pow(static_cast<double>(hyper.beta2), step);
  const AdamScalars scalars{
      static_cast<float>(hyper.lr / correction1), static_cast<float>(std::sqrt(correction2)),
      1.0f - hyper.lr * hyper.weight_decay, 1.0f - hyper.beta1, 1.0f - hyper.beta2};
  dispatch_floating(param_dtype, "adamw_update", [&](auto p_type) {
    using P = decltype(p_type);
    dispatch_floating(grad_dtype, "adamw_update", [&](auto g_type) {
      using G = decltype(g_type);
      adamw_kernel<<<grid_for(count), kThreads, 0, stream>>>(
          static_cast<P*>(param), static_cast<const G*>(grad), exp_avg, exp_avg_sq, count, hyper,
          scalars, found_inf);
    });
  });
  ALLOY_CUDA_CHECK_LAUNCH("adamw_kernel on ", count, " parameters");
}

}  // namespace alloy::cuda
