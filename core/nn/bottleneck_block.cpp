#include "core/nn/bottleneck_block.h"

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/ops/add_relu.h"
#include "core/ops/elementwise.h"

namespace alloy::nn {

BottleneckBlock::BottleneckBlock(int in_channels, int width, int stride)
    : conv1_(
          register_module("conv1", std::make_unique<Conv2d>(in_channels, width, 1, 1, 0, false))),
      bn1_(register_module("bn1", std::make_unique<BatchNorm2d>(width, 0.1f, 1e-5f,
                                                                /*fuse_relu=*/true))),
      conv2_(register_module("conv2", std::make_unique<Conv2d>(width, width, 3, stride, 1, false))),
      bn2_(register_module("bn2", std::make_unique<BatchNorm2d>(width, 0.1f, 1e-5f,
                                                                /*fuse_relu=*/true))),
      conv3_(register_module("conv3",
                             std::make_unique<Conv2d>(width, width * kExpansion, 1, 1, 0, false))),
      bn3_(register_module("bn3", std::make_unique<BatchNorm2d>(width * kExpansion))) {
  const int out_channels = width * kExpansion;
  if (stride != 1 || in_channels != out_channels) {
    auto shortcut = std::make_unique<Sequential>();
    shortcut_conv_ = &shortcut->emplace<Conv2d>(in_channels, out_channels, 1, stride, 0, false);
    shortcut_bn_ = &shortcut->emplace<BatchNorm2d>(out_channels);
    shortcut_ = &register_module("shortcut", std::move(shortcut));
  }
}

Tensor BottleneckBlock::forward(const Tensor& x) {
  const Tensor reduced = bn1_.forward(conv1_.forward(x));  // bn1 and bn2 fuse their ReLUs
  const Tensor hidden = bn2_.forward(conv2_.forward(reduced));
  const Tensor branch = bn3_.forward(conv3_.forward(hidden));
  const Tensor skip = shortcut_ ? shortcut_->forward(x) : x;
  // Mixed dtypes promote: under O1 an fp32 input meets a half branch and adds in fp32.
  const DType sum_dtype = compute_dtype(OpClass::promote, branch.dtype(), skip.dtype());
  Tensor y = add_relu_forward(in_dtype(branch, sum_dtype), in_dtype(skip, sum_dtype));
  input_dtype_ = x.dtype();
  y_ = keeps_activations() ? y : Tensor();
  return y;
}

Tensor BottleneckBlock::backward(const Tensor& dy) {
  ALLOY_CHECK(y_.defined(), "BottleneckBlock (", conv1_.weight().name,
              "): backward without a training forward");
  const Tensor y = std::move(y_);
  y_ = Tensor();
  // The shortcut first: its parameters come last in registration order, so the grad-ready
  // hook sees this block's parameters exactly reversed.
  Tensor d_skip;
  if (shortcut_) {
    shortcut_conv_->set_needs_input_grad(needs_input_grad());
    d_skip = shortcut_conv_->backward(shortcut_bn_->backward_through_relu(dy, y));
  }
  const Tensor d_hidden = conv3_.backward(bn3_.backward_through_relu(dy, y));
  const Tensor d_reduced = conv2_.backward(bn2_.backward(d_hidden));
  conv1_.set_needs_input_grad(needs_input_grad());
  const Tensor d_main = conv1_.backward(bn1_.backward(d_reduced));
  if (!needs_input_grad()) return Tensor();
  if (shortcut_) return add(d_main, d_skip);
  return add_relu_backward(y, in_dtype(dy, input_dtype_), d_main);
}

}  // namespace alloy::nn
