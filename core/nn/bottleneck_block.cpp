#include "core/nn/bottleneck_block.h"

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
  add_shortcut(in_channels, width * kExpansion, stride);
}

Tensor BottleneckBlock::forward(const Tensor& x) {
  const Tensor reduced = bn1_.forward(conv1_.forward(x));  // bn1 and bn2 fuse their ReLUs
  const Tensor hidden = bn2_.forward(conv2_.forward(reduced));
  return close_forward(x, bn3_.forward(conv3_.forward(hidden)));
}

Tensor BottleneckBlock::backward(const Tensor& dy) {
  const Tensor y = take_output(conv1_.weight());
  const Tensor d_skip = shortcut_backward(dy, y);
  const Tensor d_hidden = conv3_.backward(bn3_.backward_through_relu(dy, y));
  const Tensor d_reduced = conv2_.backward(bn2_.backward(d_hidden));
  conv1_.set_needs_input_grad(needs_input_grad());
  const Tensor d_main = conv1_.backward(bn1_.backward(d_reduced));
  return close_backward(dy, y, d_main, d_skip);
}

}  // namespace alloy::nn
