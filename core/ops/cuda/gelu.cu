#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/gelu.h"

namespace alloy::cuda {

namespace {

template <class T>
__global__ void gelu_forward_kernel(const T* x, T* y, GeluApproximation approximation,
                                    std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    y[i] = narrow<T>(gelu_value(widen(x[i]), approximation));
  }
}

template <class X, class D>
__global__ void gelu_backward_kernel(const X* x, const D* dy, D* dx,
                                     GeluApproximation approximation, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    dx[i] = narrow<D>(widen(dy[i]) * gelu_derivative(widen(x[i]), approximation));
  }
}

}  // namespace

void gelu_forward(const void* x, void* y, DType dtype, GeluApproximation approximation,
                  std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "gelu_forward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(gelu_forward_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const T*>(x), static_cast<T*>(y), approximation, count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("gelu_forward_kernel on ", count, " elements");
}

void gelu_backward(const void* x, DType x_dtype, const void* dy, void* dx, DType dy_dtype,
                   GeluApproximation approximation, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(x_dtype, dy_dtype, "gelu_backward", [&](auto x_type, auto d_type) {
    using X = decltype(x_type);
    using D = decltype(d_type);
    ALLOY_LAUNCH(gelu_backward_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const X*>(x), static_cast<const D*>(dy), static_cast<D*>(dx), approximation,
     count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("gelu_backward_kernel on ", count, " elements");
}

}  // namespace alloy::cuda
