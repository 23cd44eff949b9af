// ResNet's basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), with 3x3
// convolutions, the first one strided (the shortcut and the closing sum: nn::ResidualBase).
// Convolutions have no bias, as the batch norm that follows makes one redundant. bn1 fuses its
// ReLU (fuse_relu) and bn2's backward applies the closing ReLU's mask.
#pragma once

#include "core/nn/residual_base.h"

namespace alloy::nn {

class ResidualBlock : public ResidualBase {
 public:
  ResidualBlock(int in_channels, int out_channels, int stride = 1);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "ResidualBlock"; }

 private:
  Conv2d& conv1_;
  BatchNorm2d& bn1_;
  Conv2d& conv2_;
  BatchNorm2d& bn2_;
};

}  // namespace alloy::nn
