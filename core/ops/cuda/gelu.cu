#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/gelu.h"

namespace alloy::cuda {

namespace {

template <class T>
__global__ void gelu_forward_kernel(const T* x, T* y, GeluApproximation approximation,
                                    std::int64_t count, bool packed) {
  map_elements(
      [approximation](T value) { return narrow<T>(gelu_value(widen(value), approximation)); },
      count, packed, y, x);
}

template <class X, class D>
__global__ void gelu_backward_kernel(const X* x, const D* dy, D* dx,
                                     GeluApproximation approximation, std::int64_t count,
                                     bool packed) {
  map_elements(
      [approximation](X in, D grad) {
        return narrow<D>(widen(grad) * gelu_derivative(widen(in), approximation));
      },
      count, packed, dx, x, dy);
}

}  // namespace

void gelu_forward(const void* x, void* y, DType dtype, GeluApproximation approximation,
                  std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "gelu_forward", [&](auto type) {
    using T = decltype(type);
    const auto* in = static_cast<const T*>(x);
    auto* out = static_cast<T*>(y);
    const MapLaunch launch = map_launch(count, out, in);
    ALLOY_LAUNCH(gelu_forward_kernel, launch.grid, kThreads, 0, stream)
    (in, out, approximation, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("gelu_forward_kernel on ", count, " elements");
}

void gelu_backward(const void* x, DType x_dtype, const void* dy, void* dx, DType dy_dtype,
                   GeluApproximation approximation, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(x_dtype, dy_dtype, "gelu_backward", [&](auto x_type, auto d_type) {
    using X = decltype(x_type);
    using D = decltype(d_type);
    const auto* in = static_cast<const X*>(x);
    const auto* grad = static_cast<const D*>(dy);
    auto* grad_in = static_cast<D*>(dx);
    const MapLaunch launch = map_launch(count, grad_in, in, grad);
    ALLOY_LAUNCH(gelu_backward_kernel, launch.grid, kThreads, 0, stream)
    (in, grad, grad_in, approximation, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("gelu_backward_kernel on ", count, " elements");
}

}  // namespace alloy::cuda
