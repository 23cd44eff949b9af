// ResNet's bottleneck block (torchvision's v1.5):
// relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x))))))) + shortcut(x)), with conv1 a 1x1
// convolution to `width` channels, conv2 a 3x3 one carrying the stride, conv3 a 1x1 one to
// 4 * width; the shortcut is the identity, or a strided 1x1 convolution and batch norm when the
// shape changes. Convolutions have no bias. As in nn::ResidualBlock, each ReLU is fused into
// the op before it and its mask into the backward ops after it.
#pragma once

#include "core/nn/batch_norm2d.h"
#include "core/nn/conv2d.h"
#include "core/nn/module.h"
#include "core/nn/sequential.h"

namespace alloy::nn {

class BottleneckBlock : public Module {
 public:
  static constexpr int kExpansion = 4;

  BottleneckBlock(int in_channels, int width, int stride = 1);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "BottleneckBlock"; }
  bool is_block() const override { return true; }

 private:
  Conv2d& conv1_;
  BatchNorm2d& bn1_;
  Conv2d& conv2_;
  BatchNorm2d& bn2_;
  Conv2d& conv3_;
  BatchNorm2d& bn3_;
  // Null for the identity; else a Sequential of shortcut_conv_ and shortcut_bn_ (parameter
  // names "shortcut.0.*", "shortcut.1.*"), whose backward runs here so that the shortcut's batch
  // norm can mask its gradient.
  Sequential* shortcut_ = nullptr;
  Conv2d* shortcut_conv_ = nullptr;
  BatchNorm2d* shortcut_bn_ = nullptr;
  // Until backward: the block's output, whose sign is the final ReLU's mask.
  Tensor y_;
  DType input_dtype_ = DType::f32;
};

}  // namespace alloy::nn
