// Fused optimizer updates over one parameter tensor. The state is f32; the parameter is f32
// or half (updated in fp32, rounded once); grad may be f32 or half. If found_inf is defined (f32
// [1]) and nonzero, the update does nothing: the step is skipped without the host having to look
// (the amp contract).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

// torch.optim.SGD, with the gradient first multiplied by grad_scale:
//   g = grad_scale * grad + weight_decay * param
//   buf = g (first step) or momentum * buf + (1 - dampening) * g
//   g = g + momentum * buf (nesterov) or buf (momentum != 0)
//   param -= lr * g
struct SgdHyper {
  float lr = 0.1f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;  // L2, added to the gradient (PyTorch's SGD)
  bool nesterov = false;      // needs momentum > 0 and dampening == 0, as in PyTorch
  float grad_scale = 1.0f;    // gradient is multiplied by this first (1/loss scale)
};

// momentum_buffer: f32 like param, undefined when momentum == 0. first_step initialises the
// buffer with the gradient, as PyTorch does.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdHyper& hyper,
                bool first_step, const Tensor& found_inf = {});

// torch.optim.AdamW (without amsgrad), with the gradient first multiplied by grad_scale:
//   param *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;  // decoupled: param -= lr * wd * param
  float grad_scale = 1.0f;
};

// step is the 1-based count of updates including this one (bias correction).
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& hyper, std::int64_t step, const Tensor& found_inf = {});

namespace cpu {
// count elements; grad is storage of grad_dtype. momentum_buffer is unused when momentum == 0.
void sgd_update(float* param, const void* grad, DType grad_dtype, float* momentum_buffer,
                std::int64_t count, const SgdHyper& hyper, bool first_step);
void adamw_update(float* param, const void* grad, DType grad_dtype, float* exp_avg,
                  float* exp_avg_sq, std::int64_t count, const AdamWHyper& hyper,
                  std::int64_t step);
}  // namespace cpu

}  // namespace alloy
