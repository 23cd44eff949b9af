#include "core/nn/residual_block.h"

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/ops/add_relu.h"
#include "core/ops/elementwise.h"

namespace alloy::nn {

ResidualBlock::ResidualBlock(int in_channels, int out_channels, int stride)
    : conv1_(register_module(
          "conv1", std::make_unique<Conv2d>(in_channels, out_channels, 3, stride, 1, false))),
      bn1_(register_module("bn1", std::make_unique<BatchNorm2d>(out_channels, 0.1f, 1e-5f,
                                                                /*fuse_relu=*/true))),
      conv2_(register_module("conv2",
                             std::make_unique<Conv2d>(out_channels, out_channels, 3, 1, 1, false))),
      bn2_(register_module("bn2", std::make_unique<BatchNorm2d>(out_channels))) {
  if (stride != 1 || in_channels != out_channels) {
    auto shortcut = std::make_unique<Sequential>();
    shortcut_conv_ = &shortcut->emplace<Conv2d>(in_channels, out_channels, 1, stride, 0, false);
    shortcut_bn_ = &shortcut->emplace<BatchNorm2d>(out_channels);
    shortcut_ = &register_module("shortcut", std::move(shortcut));
  }
}

Tensor ResidualBlock::forward(const Tensor& x) {
  const Tensor hidden = bn1_.forward(conv1_.forward(x));  // relu(bn1(.)): bn1 fuses it
  const Tensor branch = bn2_.forward(conv2_.forward(hidden));
  const Tensor skip = shortcut_ ? shortcut_->forward(x) : x;
  // Mixed dtypes promote: under O1 an fp32 input meets a half branch and adds in fp32.
  const DType sum_dtype = compute_dtype(OpClass::promote, branch.dtype(), skip.dtype());
  Tensor y = add_relu_forward(in_dtype(branch, sum_dtype), in_dtype(skip, sum_dtype));
  input_dtype_ = x.dtype();
  y_ = keeps_activations() ? y : Tensor();
  return y;
}

Tensor ResidualBlock::backward(const Tensor& dy) {
  ALLOY_CHECK(y_.defined(), "ResidualBlock (", conv1_.weight().name,
              "): backward without a training forward");
  const Tensor y = std::move(y_);
  y_ = Tensor();
  // The sum's gradient is dy masked by y > 0; each consumer applies that mask itself.
  // The shortcut first: its parameters come last in registration order, so the grad-ready
  // hook sees this block's parameters exactly reversed.
  Tensor d_skip;
  if (shortcut_) {
    shortcut_conv_->set_needs_input_grad(needs_input_grad());
    d_skip = shortcut_conv_->backward(shortcut_bn_->backward_through_relu(dy, y));
  }
  const Tensor d_hidden = conv2_.backward(bn2_.backward_through_relu(dy, y));
  conv1_.set_needs_input_grad(needs_input_grad());
  const Tensor d_main = conv1_.backward(bn1_.backward(d_hidden));
  if (!needs_input_grad()) return Tensor();
  if (shortcut_) return add(d_main, d_skip);
  // The identity's gradient in the input's dtype joins the main one; casting before the mask
  // selects the same values as masking before the cast.
  return add_relu_backward(y, in_dtype(dy, input_dtype_), d_main);
}

}  // namespace alloy::nn
