// Fused optimizer updates over one parameter tensor. The parameter and its state are f32;
// grad may be f32 or half. If found_inf is defined (f32 [1]) and nonzero, the update does
// nothing: the step is skipped without the host having to look (the amp contract).
#pragma once

#include "core/tensor.h"

namespace alloy {

struct SgdHyper {
  float lr = 0.1f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;  // L2, added to the gradient (PyTorch's SGD)
  bool nesterov = false;
  float grad_scale = 1.0f;    // gradient is multiplied by this first (1/loss scale)
};

// momentum_buffer: f32 like param, undefined when momentum == 0. first_step initialises the
// buffer with the gradient, as PyTorch does.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buffer,
                const SgdHyper& hyper, bool first_step, const Tensor& found_inf = {});

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

}  // namespace alloy
