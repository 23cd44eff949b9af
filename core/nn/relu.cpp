#include "core/nn/relu.h"

#include "core/nn/pool2d.h"
#include "core/ops/pool2d.h"
#include "core/ops/relu.h"

namespace alloy::nn {

Tensor ReLU::forward(const Tensor& x) {
  Tensor y = relu_forward(x);
  kept_ = keeps_activations() ? y : Tensor();
  return y;
}

Tensor ReLU::backward(const Tensor& dy) {
  ALLOY_CHECK(kept_.defined(), "ReLU: backward without a training forward");
  Tensor dx = relu_backward(kept_, dy);
  kept_ = Tensor();
  return dx;
}

Tensor ReLU::forward_with_pool(const AvgPool2d& pool, const Tensor& x) {
  Tensor y = relu_avg_pool2d_forward(x, pool.params());
  kept_ = keeps_activations() ? x : Tensor();
  return y;
}

Tensor ReLU::backward_with_pool(const AvgPool2d& pool, const Tensor& dy) {
  ALLOY_CHECK(kept_.defined(), "ReLU: backward without a training forward");
  Tensor dx = relu_avg_pool2d_backward(kept_, dy, pool.params());
  kept_ = Tensor();
  return dx;
}

}  // namespace alloy::nn
