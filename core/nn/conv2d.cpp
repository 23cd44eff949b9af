#include "core/nn/conv2d.h"

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/nn/new_parameter.h"

namespace alloy::nn {

Conv2d::Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, bool bias)
    : weight_(register_parameter(
          "weight", new_parameter("Conv2d", {out_channels, in_channels, kernel, kernel}, 0.0f))) {
  ALLOY_CHECK(stride > 0 && padding >= 0, "Conv2d: stride must be positive and padding ",
              "non-negative, got stride ", stride, ", padding ", padding);
  if (bias) bias_ = &register_parameter("bias", new_parameter("Conv2d", {out_channels}, 0.0f));
  params_.stride_h = params_.stride_w = stride;
  params_.pad_h = params_.pad_w = padding;
}

std::string Conv2d::options() const {
  return detail::concat("kernel=", weight_.value.dim(2), ", stride=", params_.stride_h,
                        ", padding=", params_.pad_h);
}

Tensor Conv2d::forward(const Tensor& x) {
  compute_dtype_ = compute_dtype(OpClass::half_compute, x.dtype(), weight_.value.dtype());
  Tensor input = in_dtype(x, compute_dtype_);
  Tensor y = conv2d_forward(input, cached_weight_cast(weight_.value, compute_dtype_),
                            bias_ ? cached_weight_cast(bias_->value, compute_dtype_) : Tensor(),
                            params_, layout());
  input_dtype_ = x.dtype();
  x_ = keeps_activations() ? std::move(input) : Tensor();
  return y;
}

Tensor Conv2d::backward(const Tensor& dy) {
  ALLOY_CHECK(x_.defined(), "Conv2d (", weight_.name, "): backward without a training forward");
  Tensor no_bias;
  // Under O1 the gradients of the fp32 weights accumulate in fp32 from half operands.
  const Conv2dGrads grads = conv2d_backward(
      x_, cached_weight_cast(weight_.value, compute_dtype_), in_dtype(dy, compute_dtype_),
      grad_of(weight_), bias_ ? grad_of(*bias_) : no_bias, params_, needs_input_grad(), layout());
  x_ = Tensor();
  notify_grads_ready();
  return grads.dx.defined() ? in_dtype(grads.dx, input_dtype_) : Tensor();
}

}  // namespace alloy::nn
