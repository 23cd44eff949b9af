#include "core/ops/relu.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/relu.h"
#endif

namespace alloy {

Tensor relu_forward(const Tensor& x) {
  constexpr const char* op = "relu_forward";
  const Device device = common_device(op, {&x});
  check_floating(op, "x", x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::relu_forward(x.raw(), y.raw(), x.dtype(), x.numel(), cuda::stream_of(device));
      return y;
    });
  cpu::relu_forward(x.raw(), y.raw(), x.dtype(), x.numel());
  return y;
}

Tensor relu_backward(const Tensor& y, const Tensor& dy) {
  constexpr const char* op = "relu_backward";
  const Device device = common_device(op, {&y, &dy});
  check_floating(op, "y", y);
  check_floating(op, "dy", dy);
  check_shape(op, "dy", dy, y.shape());
  Tensor dx = Tensor::empty(dy.shape(), dy.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::relu_backward(y.raw(), y.dtype(), dy.raw(), dx.raw(), dy.dtype(), dy.numel(),
                          cuda::stream_of(device));
      return dx;
    });
  cpu::relu_backward(y.raw(), y.dtype(), dy.raw(), dx.raw(), dy.dtype(), dy.numel());
  return dx;
}

}  // namespace alloy
