#include "core/ops/add_relu.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/add_relu.h"
#endif

namespace alloy {

Tensor add_relu_forward(const Tensor& a, const Tensor& b) {
  constexpr const char* op = "add_relu_forward";
  const Device device = check_elementwise(op, {{"a", a}, {"b", b}});
  Tensor y = Tensor::empty(a.shape(), a.dtype(), device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, add_relu_forward, a.raw(), a.dtype(), b.raw(), b.dtype(), y.raw(),
                   a.numel());
  return y;
}

Tensor add_relu_backward(const Tensor& y, const Tensor& dy, const Tensor& d_main) {
  constexpr const char* op = "add_relu_backward";
  ALLOY_CHECK(y.defined(), op, ": y is an undefined tensor (was the training forward run?)");
  const Device device = check_elementwise(op, {{"y", y}, {"dy", dy}, {"d_main", d_main}});
  Tensor dx = Tensor::empty(y.shape(), d_main.dtype(), device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, add_relu_backward, y.raw(), y.dtype(), dy.raw(), dy.dtype(),
                   d_main.raw(), d_main.dtype(), dx.raw(), y.numel());
  return dx;
}

}  // namespace alloy
