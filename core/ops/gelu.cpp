#include "core/ops/gelu.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/gelu.h"
#endif

namespace alloy {

const char* gelu_approximation_name(GeluApproximation approximation) {
  return approximation == GeluApproximation::tanh ? "tanh" : "none";
}

Tensor gelu_forward(const Tensor& x, GeluApproximation approximation) {
  constexpr const char* op = "gelu_forward";
  const Device device = check_elementwise(op, {{"x", x}});
  Tensor y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, gelu_forward, x.raw(), y.raw(), x.dtype(), approximation, x.numel());
  return y;
}

Tensor gelu_backward(const Tensor& x, const Tensor& dy, GeluApproximation approximation) {
  constexpr const char* op = "gelu_backward";
  const Device device = check_elementwise(op, {{"x", x}, {"dy", dy}});
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, gelu_backward, x.raw(), x.dtype(), dy.raw(), dx.raw(), dy.dtype(),
                   approximation, dy.numel());
  return dx;
}

}  // namespace alloy
