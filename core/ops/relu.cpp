#include "core/ops/relu.h"

#include "core/ops/dispatch.h"

namespace alloy {

Tensor relu_forward(const Tensor& x) {
  constexpr const char* op = "relu_forward";
  const Device device = common_device(op, {&x});
  check_floating(op, "x", x);
  if (!device.is_cpu()) no_kernel(op, device);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
  cpu::relu_forward(x.raw(), y.raw(), x.dtype(), x.numel());
  return y;
}

Tensor relu_backward(const Tensor& y, const Tensor& dy) {
  constexpr const char* op = "relu_backward";
  const Device device = common_device(op, {&y, &dy});
  check_floating(op, "y", y);
  check_floating(op, "dy", dy);
  check_shape(op, "dy", dy, y.shape());
  if (!device.is_cpu()) no_kernel(op, device);
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), device, MemoryCategory::activations);
  cpu::relu_backward(y.raw(), y.dtype(), dy.raw(), dx.raw(), dy.dtype(), dy.numel());
  return dx;
}

}  // namespace alloy
