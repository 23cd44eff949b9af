#include "core/nn/linear.h"

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/nn/new_parameter.h"
#include "core/ops/linear.h"

namespace alloy::nn {

Linear::Linear(int in_features, int out_features, bool bias)
    : weight_(register_parameter("weight",
                                 new_parameter("Linear", {out_features, in_features}, 0.0f))) {
  if (bias) bias_ = &register_parameter("bias", new_parameter("Linear", {out_features}, 0.0f));
}

Tensor Linear::forward(const Tensor& x) {
  compute_dtype_ = compute_dtype(OpClass::half_compute, x.dtype(), weight_.value.dtype());
  Tensor input = in_dtype(x, compute_dtype_);
  Tensor y = linear_forward(input, cached_weight_cast(weight_.value, compute_dtype_),
                            bias_ ? cached_weight_cast(bias_->value, compute_dtype_) : Tensor());
  input_dtype_ = x.dtype();
  x_ = keeps_activations() ? std::move(input) : Tensor();
  return y;
}

Tensor Linear::backward(const Tensor& dy) {
  ALLOY_CHECK(x_.defined(), "Linear (", weight_.name, "): backward without a training forward");
  Tensor no_bias;
  // Under O1 the gradients of the fp32 weights accumulate in fp32 from half operands.
  const LinearGrads grads = linear_backward(x_, cached_weight_cast(weight_.value, compute_dtype_),
                                            in_dtype(dy, compute_dtype_), grad_of(weight_),
                                            bias_ ? grad_of(*bias_) : no_bias, needs_input_grad());
  x_ = Tensor();
  notify_grads_ready();
  return grads.dx.defined() ? in_dtype(grads.dx, input_dtype_) : Tensor();
}

}  // namespace alloy::nn
