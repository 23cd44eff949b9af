#include "core/nn/residual_block.h"

namespace alloy::nn {

ResidualBlock::ResidualBlock(int in_channels, int out_channels, int stride)
    : conv1_(register_module(
          "conv1", std::make_unique<Conv2d>(in_channels, out_channels, 3, stride, 1, false))),
      bn1_(register_module("bn1", std::make_unique<BatchNorm2d>(out_channels, 0.1f, 1e-5f,
                                                                /*fuse_relu=*/true))),
      conv2_(register_module("conv2",
                             std::make_unique<Conv2d>(out_channels, out_channels, 3, 1, 1, false))),
      bn2_(register_module("bn2", std::make_unique<BatchNorm2d>(out_channels))) {
  add_shortcut(in_channels, out_channels, stride);
}

Tensor ResidualBlock::forward(const Tensor& x) {
  const Tensor hidden = bn1_.forward(conv1_.forward(x));  // relu(bn1(.)): bn1 fuses it
  return close_forward(x, bn2_.forward(conv2_.forward(hidden)));
}

Tensor ResidualBlock::backward(const Tensor& dy) {
  const Tensor y = take_output(conv1_.weight());
  // The sum's gradient is dy masked by y > 0; each consumer applies that mask itself.
  const Tensor d_skip = shortcut_backward(dy, y);
  const Tensor d_hidden = conv2_.backward(bn2_.backward_through_relu(dy, y));
  conv1_.set_needs_input_grad(needs_input_grad());
  const Tensor d_main = conv1_.backward(bn1_.backward(d_hidden));
  return close_backward(dy, y, d_main, d_skip);
}

}  // namespace alloy::nn
