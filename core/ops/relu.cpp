#include "core/ops/relu.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/relu.h"
#endif

namespace alloy {

Tensor relu_forward(const Tensor& x) {
  constexpr const char* op = "relu_forward";
  const Device device = check_elementwise(op, {{"x", x}});
  Tensor y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, relu_forward, x.raw(), y.raw(), x.dtype(), x.numel());
  return y;
}

Tensor relu_backward(const Tensor& y, const Tensor& dy) {
  constexpr const char* op = "relu_backward";
  const Device device = check_elementwise(op, {{"y", y}, {"dy", dy}});
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, relu_backward, y.raw(), y.dtype(), dy.raw(), dx.raw(), dy.dtype(),
                   dy.numel());
  return dx;
}

}  // namespace alloy
