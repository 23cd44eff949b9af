#include "core/nn/flatten.h"

#include "core/ops/elementwise.h"

namespace alloy::nn {

Tensor Flatten::forward(const Tensor& x) {
  x_shape_ = keeps_activations() ? x.shape() : Shape();
  return flatten(x);
}

Tensor Flatten::backward(const Tensor& dy) {
  ALLOY_CHECK(!x_shape_.empty(), "Flatten: backward without a training forward");
  Tensor dx = dy.reshape(x_shape_);
  x_shape_.clear();
  return dx;
}

}  // namespace alloy::nn
