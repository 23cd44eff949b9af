#include "core/nn/layer_norm.h"

#include <cmath>

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/nn/new_parameter.h"

namespace alloy::nn {

LayerNorm::LayerNorm(int features, float eps)
    : weight_(register_parameter("weight", new_parameter("LayerNorm", {features}, 1.0f),
                                 /*is_norm=*/true)),
      bias_(register_parameter("bias", new_parameter("LayerNorm", {features}, 0.0f),
                               /*is_norm=*/true)),
      features_(features),
      eps_(eps) {
  ALLOY_CHECK(eps >= 0.0f && std::isfinite(eps),
              "LayerNorm: eps must be finite and non-negative, got ", eps);
}

std::string LayerNorm::options() const {
  return detail::concat("features=", features_, ", eps=", eps_);
}

Tensor LayerNorm::forward(const Tensor& x) {
  // As batch norm: fp32 parameters take an input of any dtype and keep it (half in, half out,
  // fp32 arithmetic: O1, O2's keep_batchnorm_fp32); half parameters (O3) take their own dtype.
  Tensor input =
      in_dtype(x, compute_dtype(OpClass::fp32_statistics, x.dtype(), weight_.value.dtype()));
  input_dtype_ = x.dtype();
  const bool keep = keeps_activations();
  LayerNormResult result = layer_norm_forward(input, weight_.value, bias_.value, eps_, keep);
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
  Tensor dx = layer_norm_backward(dy, x_, weight_.value, saved_, grad_of(weight_), grad_of(bias_));
  x_ = Tensor();
  saved_ = {};
  notify_grads_ready();
  return in_dtype(dx, input_dtype_);
}

}  // namespace alloy::nn
