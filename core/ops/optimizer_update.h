// Fused optimizer updates over a list of parameter tensors: one pass updates every parameter
// (on CUDA one multi-tensor launch per 64 tensors, on the CPU one fork over the thread pool).
// The state is f32; a parameter is f32 or half (updated in fp32, rounded once); a gradient may
// be any floating dtype.
//
// Nothing that changes from step to step is passed by value, so a captured CUDA graph replays
// current values: the learning rate and the step count are read where the parameters live
// (`lr`, `step`), the step count is advanced there, and if found_inf is defined (f32 [1]) and
// nonzero (NaN included) the update changes nothing, step count included: the step is skipped
// without the host looking (the amp contract; as in Apex and PyTorch's GradScaler, a skipped
// step is not an optimizer step). Likewise grad_factor, if defined (f32 [1]), is read there:
// each gradient element is first multiplied by it in f32 (one rounding, as if the gradients had
// been multiplied in place beforehand, like PyTorch's clip_grad_norm_ does), then used as below
// (grad_scale included): gradient-norm clipping's coefficient (core/ops/clip_grad_norm.h),
// applied as the update reads the gradient instead of in a pass of its own. grad_unscale, if
// defined (f32 [1]), is read there too and multiplies each element before grad_factor does, its
// product rounded to f32 on its own: 1/the loss scale of gradients that arrive still scaled (O2's
// half gradients; amp/ops/unscale.h: check_and_invert), so that the update sees
//   float(float(grad * grad_unscale) * grad_factor) * grad_scale,
// the same bits as an fp32 copy unscaled beforehand and then multiplied by grad_factor. Without
// the factors the arithmetic is exactly as before they existed (the kernels multiply by 1, which
// is exact).
//
// With stochastic rounding on (the hypers' `rounding`), a half parameter (one without an fp32
// master: O3, or O2 without master weights) is rounded stochastically instead of to nearest
// (core/stochastic_rounding.h), with the random words of (rounding.key, the step count including
// this update, the tensor's `index`, the element): the same bits on the CPU and on CUDA, where
// the count is read on the device like everything else that changes per step. f32 parameters
// and model copies are stored as before; off, every store is bit-identical to round-to-nearest.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace alloy {

// --stochastic-rounding: key is the run's seed.
struct StochasticRounding {
  bool enabled = false;
  std::uint64_t key = 0;
};

// torch.optim.SGD (dampening 0), with the gradient first multiplied by grad_scale:
//   g = grad_scale * grad + weight_decay * param
//   buf = momentum * buf + g
//   g = g + momentum * buf (nesterov) or buf (momentum != 0)
//   param -= lr * g
// The buffer starts at zero, which gives PyTorch's first-step buffer = g.
struct SgdHyper {
  float momentum = 0.0f;
  float weight_decay = 0.0f;  // L2, added to the gradient (PyTorch's SGD)
  bool nesterov = false;      // needs momentum > 0, as in PyTorch
  float grad_scale = 1.0f;    // gradient is multiplied by this first (1/loss scale)
  StochasticRounding rounding;
};

// torch.optim.AdamW (without amsgrad), with the gradient first multiplied by grad_scale, and
// t = the step count including this update:
//   param *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   param -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
struct AdamWHyper {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;  // decoupled: param -= lr * wd * param
  float grad_scale = 1.0f;
  StochasticRounding rounding;
};

// One parameter's tensors, all of the parameter's shape and on one device. model_copy, when
// not null, receives the updated parameter (which must then be f32) rounded once to the copy's
// dtype in the same pass: O2's half model weight written from its fp32 master, as Apex's fused
// optimizers write the model copy. A skipped step writes it no more than the parameter (it already
// holds the rounded parameter).
struct SgdTensors {
  Tensor* param;
  const Tensor* grad;
  Tensor* momentum_buffer;  // f32; unused (may be null) when momentum == 0
  Tensor* model_copy = nullptr;
  std::uint32_t index = 0;  // the parameter's, in stochastic rounding's random words
};

struct AdamWTensors {
  Tensor* param;
  const Tensor* grad;
  Tensor* exp_avg;     // f32
  Tensor* exp_avg_sq;  // f32
  Tensor* model_copy = nullptr;
  std::uint32_t index = 0;  // the parameter's, in stochastic rounding's random words
};

// lr: f32 [1]. step: i32 [2]; step[0] counts the updates applied so far and each call that is
// not skipped adds one; step[1] must be zero (the CUDA kernel counts its finished blocks there
// and leaves it at zero). found_inf, grad_factor and grad_unscale: f32 [1] or undefined. A call
// with an empty list changes nothing. All tensors share one device.
void sgd_update(const std::vector<SgdTensors>& tensors, const SgdHyper& hyper, const Tensor& lr,
                Tensor& step, const Tensor& found_inf = {}, const Tensor& grad_factor = {},
                const Tensor& grad_unscale = {});
void adamw_update(const std::vector<AdamWTensors>& tensors, const AdamWHyper& hyper,
                  const Tensor& lr, Tensor& step, const Tensor& found_inf = {},
                  const Tensor& grad_factor = {}, const Tensor& grad_unscale = {});

// One tensor of a multi-tensor update as raw storage: what the CPU and CUDA kernels take.
struct UpdateBuffers {
  void* param;
  DType param_dtype;
  const void* grad;
  DType grad_dtype;
  float* state[2];  // SGD: the momentum buffer (null without momentum); AdamW: exp_avg, exp_avg_sq
  void* copy;       // the model copy, or null
  DType copy_dtype;
  std::int64_t count;
  std::uint32_t index;  // SgdTensors::index
};

namespace cpu {
// The gradients' device factors as the CPU kernels take them: 1 for one the call has none of.
struct GradFactors {
  float unscale = 1.0f;  // applied first
  float factor = 1.0f;
};

// step: the step count including this update (AdamW's bias corrections, stochastic rounding's
// words).
void sgd_update(const std::vector<UpdateBuffers>& tensors, const SgdHyper& hyper, float lr,
                std::int64_t step, GradFactors factors);
void adamw_update(const std::vector<UpdateBuffers>& tensors, const AdamWHyper& hyper, float lr,
                  std::int64_t step, GradFactors factors);
}  // namespace cpu

}  // namespace alloy
