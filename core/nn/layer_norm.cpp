#include "core/nn/layer_norm.h"

#include <cmath>

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/nn/new_parameter.h"

namespace alloy::nn {

LayerNorm::LayerNorm(int features, float eps, bool bias)
    : weight_(register_parameter("weight", new_parameter("LayerNorm", {features}, 1.0f),
                                 /*is_norm=*/true)),
      features_(features),
      eps_(eps) {
  if (bias) {
    bias_ = &register_parameter("bias", new_parameter("LayerNorm", {features}, 0.0f),
                                /*is_norm=*/true);
  }
  ALLOY_CHECK(eps >= 0.0f && std::isfinite(eps),
              "LayerNorm: eps must be finite and non-negative, got ", eps);
}

Parameter& LayerNorm::bias() {
  ALLOY_CHECK(bias_ != nullptr, "LayerNorm (", weight_.name, ") has no bias");
  return *bias_;
}

const Tensor& LayerNorm::shift() {
  if (bias_ != nullptr) return bias_->value;
  const Tensor& w = weight_.value;
  // Follows the weight's dtype and device (cast_parameters, to_device).
  if (!zero_bias_.defined() || zero_bias_.dtype() != w.dtype() ||
      zero_bias_.device() != w.device()) {
    zero_bias_ = Tensor::zeros(w.shape(), w.dtype(), w.device(), MemoryCategory::workspace);
  }
  return zero_bias_;
}

Tensor& LayerNorm::shift_grad() {
  if (bias_ != nullptr) return grad_of(*bias_);
  unused_dbias_ = Tensor::zeros(weight_.value.shape(), weight_.value.dtype(),
                                weight_.value.device(), MemoryCategory::workspace);
  return unused_dbias_;
}

std::string LayerNorm::options() const {
  return detail::concat("features=", features_, ", eps=", eps_, bias_ ? "" : ", bias=false");
}

Tensor LayerNorm::forward(const Tensor& x) {
  // As batch norm: fp32 parameters take an input of any dtype and keep it (half in, half out,
  // fp32 arithmetic: O1, O2's keep_batchnorm_fp32); half parameters (O3) take their own dtype.
  Tensor input =
      in_dtype(x, compute_dtype(OpClass::fp32_statistics, x.dtype(), weight_.value.dtype()));
  input_dtype_ = x.dtype();
  const bool keep = keeps_activations();
  LayerNormResult result = layer_norm_forward(input, weight_.value, shift(), eps_, keep);
  if (keep) {
    x_ = std::move(input);
    saved_ = std::move(result.saved);
  } else {
    x_ = Tensor();
    saved_ = {};
  }
  return std::move(result.y);
}

Tensor LayerNorm::backward(const Tensor& dy) {
  ALLOY_CHECK(x_.defined(), "LayerNorm (", weight_.name, "): backward without a training forward");
  // dy of any dtype as it comes (the op takes it, so an f32 gradient is not rounded first).
  Tensor dx = layer_norm_backward(dy, x_, weight_.value, saved_, grad_of(weight_), shift_grad());
  unused_dbias_ = Tensor();
  x_ = Tensor();
  saved_ = {};
  notify_grads_ready();
  return in_dtype(dx, input_dtype_);
}

}  // namespace alloy::nn
