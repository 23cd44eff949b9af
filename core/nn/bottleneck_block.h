// ResNet's bottleneck block (torchvision's v1.5):
// relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x))))))) + shortcut(x)), with conv1 a 1x1
// convolution to `width` channels, conv2 a 3x3 one carrying the stride, conv3 a 1x1 one to
// 4 * width (the shortcut and the closing sum: nn::ResidualBase). Convolutions have no bias;
// bn1 and bn2 fuse their ReLUs, bn3's backward applies the closing ReLU's mask.
#pragma once

#include "core/nn/residual_base.h"

namespace alloy::nn {

class BottleneckBlock : public ResidualBase {
 public:
  static constexpr int kExpansion = 4;

  BottleneckBlock(int in_channels, int width, int stride = 1);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "BottleneckBlock"; }

 private:
  Conv2d& conv1_;
  BatchNorm2d& bn1_;
  Conv2d& conv2_;
  BatchNorm2d& bn2_;
  Conv2d& conv3_;
  BatchNorm2d& bn3_;
};

}  // namespace alloy::nn
