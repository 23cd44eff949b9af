#include "core/ops/add_relu.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/add_relu.h"
#endif

namespace alloy {

Tensor add_relu_forward(const Tensor& a, const Tensor& b) {
  constexpr const char* op = "add_relu_forward";
  const Device device = common_device(op, {&a, &b});
  check_floating(op, "a", a);
  check_floating(op, "b", b);
  check_shape(op, "b", b, a.shape());
  Tensor y = Tensor::empty(a.shape(), a.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::add_relu_forward(a.raw(), a.dtype(), b.raw(), b.dtype(), y.raw(), a.numel(),
                             cuda::stream_of(device));
      return y;
    });
  cpu::add_relu_forward(a.raw(), a.dtype(), b.raw(), b.dtype(), y.raw(), a.numel());
  return y;
}

Tensor add_relu_backward(const Tensor& y, const Tensor& dy, const Tensor& d_main) {
  constexpr const char* op = "add_relu_backward";
  ALLOY_CHECK(y.defined(), op, ": y is an undefined tensor (was the training forward run?)");
  const Device device = common_device(op, {&y, &dy, &d_main});
  check_floating(op, "y", y);
  check_floating(op, "dy", dy);
  check_floating(op, "d_main", d_main);
  check_shape(op, "dy", dy, y.shape());
  check_shape(op, "d_main", d_main, y.shape());
  Tensor dx = Tensor::empty(y.shape(), d_main.dtype(), device, MemoryCategory::activations);
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::add_relu_backward(y.raw(), y.dtype(), dy.raw(), dy.dtype(), d_main.raw(),
                              d_main.dtype(), dx.raw(), y.numel(), cuda::stream_of(device));
      return dx;
    });
  cpu::add_relu_backward(y.raw(), y.dtype(), dy.raw(), dy.dtype(), d_main.raw(), d_main.dtype(),
                         dx.raw(), y.numel());
  return dx;
}

}  // namespace alloy
