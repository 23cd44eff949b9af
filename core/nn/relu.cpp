#include "core/nn/relu.h"

#include "core/ops/relu.h"

namespace alloy::nn {

Tensor ReLU::forward(const Tensor& x) {
  Tensor y = relu_forward(x);
  y_ = keeps_activations() ? y : Tensor();
  return y;
}

Tensor ReLU::backward(const Tensor& dy) {
  ALLOY_CHECK(y_.defined(), "ReLU: backward without a training forward");
  Tensor dx = relu_backward(y_, dy);
  y_ = Tensor();
  return dx;
}

}  // namespace alloy::nn
