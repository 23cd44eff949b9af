#include "core/ops/cuda/add_relu.h"
#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

namespace {

// __fadd_rn keeps the sums unfused and correctly rounded, as on the CPU.
template <class A, class B>
__global__ void add_relu_forward_kernel(const A* a, const B* b, A* y, std::int64_t count,
                                        bool packed) {
  map_elements(
      [](A u, B v) {
        const float sum = __fadd_rn(widen(u), widen(v));
        return narrow<A>(sum <= 0.0f ? 0.0f : sum);
      },
      count, packed, y, a, b);
}

// y's dtype is a template parameter too, so that y moves in packs like the others.
template <class Y, class D, class M>
__global__ void add_relu_backward_kernel(const Y* y, const D* dy, const M* d_main, M* dx,
                                         std::int64_t count, bool packed) {
  map_elements(
      [](Y out, D grad, M main_grad) {
        return narrow<M>(__fadd_rn(widen(main_grad), widen(out) > 0.0f ? widen(grad) : 0.0f));
      },
      count, packed, dx, y, dy, d_main);
}

}  // namespace

void add_relu_forward(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y,
                      std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(a_dtype, b_dtype, "add_relu_forward", [&](auto a_type, auto b_type) {
    using A = decltype(a_type);
    using B = decltype(b_type);
    const auto* left = static_cast<const A*>(a);
    const auto* right = static_cast<const B*>(b);
    auto* out = static_cast<A*>(y);
    const MapLaunch launch = map_launch(count, out, left, right);
    ALLOY_LAUNCH(add_relu_forward_kernel, launch.grid, kThreads, 0, stream)
    (left, right, out, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("add_relu_forward_kernel on ", count, " elements");
}

void add_relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype,
                       const void* d_main, DType d_main_dtype, void* dx, std::int64_t count,
                       cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(y_dtype, "add_relu_backward", [&](auto y_type) {
    dispatch_floating_pair(
        dy_dtype, d_main_dtype, "add_relu_backward", [&](auto d_type, auto m_type) {
          using Y = decltype(y_type);
          using D = decltype(d_type);
          using M = decltype(m_type);
          const auto* out = static_cast<const Y*>(y);
          const auto* grad = static_cast<const D*>(dy);
          const auto* main_grad = static_cast<const M*>(d_main);
          auto* grad_in = static_cast<M*>(dx);
          const MapLaunch launch = map_launch(count, grad_in, out, grad, main_grad);
          ALLOY_LAUNCH(add_relu_backward_kernel, launch.grid, kThreads, 0, stream)
          (out, grad, main_grad, grad_in, count, launch.packed);
        });
  });
  ALLOY_CUDA_CHECK_LAUNCH("add_relu_backward_kernel on ", count, " elements");
}

}  // namespace alloy::cuda
