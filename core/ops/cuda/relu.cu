#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/relu.h"

namespace alloy::cuda {

namespace {

// Selects stored values, never computes new ones: x where x > 0 or NaN, else +0 (so -0 and
// negative values give +0, as the CPU kernels do).
template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, std::int64_t count, bool packed) {
  map_elements([](T value) { return widen(value) <= 0.0f ? narrow<T>(0.0f) : value; }, count,
               packed, y, x);
}

template <class Y, class D>
__global__ void relu_backward_kernel(const Y* y, const D* dy, D* dx, std::int64_t count,
                                     bool packed) {
  map_elements([](Y out, D grad) { return widen(out) > 0.0f ? grad : narrow<D>(0.0f); }, count,
               packed, dx, y, dy);
}

}  // namespace

void relu_forward(const void* x, void* y, DType dtype, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "relu_forward", [&](auto type) {
    using T = decltype(type);
    const auto* in = static_cast<const T*>(x);
    auto* out = static_cast<T*>(y);
    const MapLaunch launch = map_launch(count, out, in);
    ALLOY_LAUNCH(relu_forward_kernel, launch.grid, kThreads, 0, stream)
    (in, out, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("relu_forward_kernel on ", count, " elements");
}

void relu_backward(const void* y, DType y_dtype, const void* dy, void* dx, DType dy_dtype,
                   std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(y_dtype, dy_dtype, "relu_backward", [&](auto y_type, auto d_type) {
    using Y = decltype(y_type);
    using D = decltype(d_type);
    const auto* out = static_cast<const Y*>(y);
    const auto* grad = static_cast<const D*>(dy);
    auto* grad_in = static_cast<D*>(dx);
    const MapLaunch launch = map_launch(count, grad_in, out, grad);
    ALLOY_LAUNCH(relu_backward_kernel, launch.grid, kThreads, 0, stream)
    (out, grad, grad_in, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("relu_backward_kernel on ", count, " elements");
}

}  // namespace alloy::cuda
