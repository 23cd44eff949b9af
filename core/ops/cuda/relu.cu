#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/relu.h"

namespace alloy::cuda {

namespace {

// Selects stored values, never computes new ones: x where x > 0 or NaN, else +0 (so -0 and
// negative values give +0, as the CPU kernels do).
template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    const float value = widen(x[i]);
    y[i] = value <= 0.0f ? narrow<T>(0.0f) : x[i];
  }
}

template <class Y, class D>
__global__ void relu_backward_kernel(const Y* y, const D* dy, D* dx, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    dx[i] = widen(y[i]) > 0.0f ? dy[i] : narrow<D>(0.0f);
  }
}

}  // namespace

void relu_forward(const void* x, void* y, DType dtype, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "relu_forward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(relu_forward_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const T*>(x), static_cast<T*>(y), count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("relu_forward_kernel on ", count, " elements");
}

void relu_backward(const void* y, DType y_dtype, const void* dy, void* dx, DType dy_dtype,
                   std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(y_dtype, dy_dtype, "relu_backward", [&](auto y_type, auto d_type) {
    using Y = decltype(y_type);
    using D = decltype(d_type);
    ALLOY_LAUNCH(relu_backward_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const Y*>(y), static_cast<const D*>(dy), static_cast<D*>(dx), count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("relu_backward_kernel on ", count, " elements");
}

}  // namespace alloy::cuda
