// ResNet's basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), with 3x3
// convolutions, the first one strided; the shortcut is the identity, or a strided 1x1
// convolution and batch norm when the shape changes. Convolutions have no bias, as the
// batch norm that follows makes one redundant.
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

 private:
  Conv2d& conv1_;
  BatchNorm2d& bn1_;
  Conv2d& conv2_;
  BatchNorm2d& bn2_;
  Sequential* shortcut_ = nullptr;  // null for the identity
  // Until backward: the two relu outputs (relu's backward needs only its output).
  Tensor hidden_;
  Tensor y_;
  DType input_dtype_ = DType::f32;
};

}  // namespace alloy::nn
