// ResNet's basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), with 3x3
// convolutions, the first one strided; the shortcut is the identity, or a strided 1x1
// convolution and batch norm when the shape changes. Convolutions have no bias, as the
// batch norm that follows makes one redundant. Each ReLU is fused into the op before it
// (bn1's fuse_relu, add_relu_forward) and its mask into the backward ops after it, with the
// same bits as the separate ops.
#pragma once

#include "core/nn/batch_norm2d.h"
#include "core/nn/conv2d.h"
#include "core/nn/module.h"
#include "core/nn/sequential.h"

namespace alloy::nn {

class ResidualBlock : public Module {
 public:
  ResidualBlock(int in_channels, int out_channels, int stride = 1);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "ResidualBlock"; }
  bool is_block() const override { return true; }

 private:
  Conv2d& conv1_;
  BatchNorm2d& bn1_;
  Conv2d& conv2_;
  BatchNorm2d& bn2_;
  // Null for the identity; else a Sequential holding shortcut_conv_ and shortcut_bn_ (the
  // parameter names "shortcut.0.*", "shortcut.1.*"), whose backward runs here so that the
  // shortcut's batch norm can mask its gradient.
  Sequential* shortcut_ = nullptr;
  Conv2d* shortcut_conv_ = nullptr;
  BatchNorm2d* shortcut_bn_ = nullptr;
  // Until backward: the block's output, whose sign is the final ReLU's mask (bn1 keeps its own).
  Tensor y_;
  DType input_dtype_ = DType::f32;
};

}  // namespace alloy::nn
