#include "core/nn/gelu.h"

namespace alloy::nn {

std::string GELU::options() const {
  return std::string("approximate=") + gelu_approximation_name(approximation_);
}

Tensor GELU::forward(const Tensor& x) {
  Tensor y = gelu_forward(x, approximation_);
  x_ = keeps_activations() ? x : Tensor();
  return y;
}

Tensor GELU::backward(const Tensor& dy) {
  ALLOY_CHECK(x_.defined(), "GELU: backward without a training forward");
  Tensor dx = gelu_backward(x_, dy, approximation_);
  x_ = Tensor();
  return dx;
}

}  // namespace alloy::nn
