// y = max(x, 0); NaN propagates. Backward uses the output: dx = dy where y > 0, else 0.
#pragma once

#include "core/tensor.h"

namespace alloy {

Tensor relu_forward(const Tensor& x);
Tensor relu_backward(const Tensor& y, const Tensor& dy);

}  // namespace alloy
