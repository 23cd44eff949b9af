#include "core/nn/residual_base.h"

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/ops/add_relu.h"
#include "core/ops/elementwise.h"

namespace alloy::nn {

void ResidualBase::add_shortcut(int in_channels, int out_channels, int stride) {
  if (stride == 1 && in_channels == out_channels) return;
  auto shortcut = std::make_unique<Sequential>();
  shortcut_conv_ = &shortcut->emplace<Conv2d>(in_channels, out_channels, 1, stride, 0, false);
  shortcut_bn_ = &shortcut->emplace<BatchNorm2d>(out_channels);
  shortcut_ = &register_module("shortcut", std::move(shortcut));
}

Tensor ResidualBase::close_forward(const Tensor& x, const Tensor& branch) {
  const Tensor skip = shortcut_ ? shortcut_->forward(x) : x;
  // Mixed dtypes promote: under O1 an fp32 input meets a half branch and adds in fp32.
  const DType sum_dtype = compute_dtype(OpClass::promote, branch.dtype(), skip.dtype());
  Tensor y = add_relu_forward(in_dtype(branch, sum_dtype), in_dtype(skip, sum_dtype));
  input_dtype_ = x.dtype();
  y_ = keeps_activations() ? y : Tensor();
  return y;
}

Tensor ResidualBase::take_output(const Parameter& first) {
  ALLOY_CHECK(y_.defined(), type_name(), " (", first.name,
              "): backward without a training forward");
  Tensor y = std::move(y_);
  y_ = Tensor();
  return y;
}

Tensor ResidualBase::shortcut_backward(const Tensor& dy, const Tensor& y) {
  if (!shortcut_) return Tensor();
  shortcut_conv_->set_needs_input_grad(needs_input_grad());
  return shortcut_conv_->backward(shortcut_bn_->backward_through_relu(dy, y));
}

Tensor ResidualBase::close_backward(const Tensor& dy, const Tensor& y, const Tensor& d_main,
                                    const Tensor& d_skip) {
  if (!needs_input_grad()) return Tensor();
  if (shortcut_) return add(d_main, d_skip);
  // The identity's gradient in the input's dtype joins the main one; casting before the mask
  // selects the same values as masking before the cast.
  return add_relu_backward(y, in_dtype(dy, input_dtype_), d_main);
}

}  // namespace alloy::nn
