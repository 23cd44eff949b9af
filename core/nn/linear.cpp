#include "core/nn/linear.h"

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
  Tensor input = in_dtype(x, weight_.value.dtype());
  Tensor y = linear_forward(input, weight_.value, bias_ ? bias_->value : Tensor());
  input_dtype_ = x.dtype();
  x_ = training() ? std::move(input) : Tensor();
  return y;
}

Tensor Linear::backward(const Tensor& dy) {
  ALLOY_CHECK(x_.defined(), "Linear (", weight_.name, "): backward without a training forward");
  Tensor no_bias;
  const LinearGrads grads =
      linear_backward(x_, weight_.value, in_dtype(dy, weight_.value.dtype()), grad_of(weight_),
                      bias_ ? grad_of(*bias_) : no_bias, needs_input_grad());
  x_ = Tensor();
  notify_grads_ready();
  return grads.dx.defined() ? in_dtype(grads.dx, input_dtype_) : Tensor();
}

}  // namespace alloy::nn
