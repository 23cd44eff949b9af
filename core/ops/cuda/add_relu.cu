#include "core/ops/cuda/add_relu.h"
#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

namespace {

// __fadd_rn keeps the sums unfused and correctly rounded, as on the CPU.
template <class A, class B>
__global__ void add_relu_forward_kernel(const A* a, const B* b, A* y, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    const float sum = __fadd_rn(widen(a[i]), widen(b[i]));
    y[i] = narrow<A>(sum <= 0.0f ? 0.0f : sum);
  }
}

// y is only tested for sign: read through load_any, which spares a third template dimension.
template <class D, class M>
__global__ void add_relu_backward_kernel(const void* y, DType y_dtype, const D* dy, const M* d_main,
                                         M* dx, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    const float grad = load_any(y, y_dtype, i) > 0.0f ? widen(dy[i]) : 0.0f;
    dx[i] = narrow<M>(__fadd_rn(widen(d_main[i]), grad));
  }
}

}  // namespace

void add_relu_forward(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y,
                      std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(a_dtype, b_dtype, "add_relu_forward", [&](auto a_type, auto b_type) {
    using A = decltype(a_type);
    using B = decltype(b_type);
    ALLOY_LAUNCH(add_relu_forward_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const A*>(a), static_cast<const B*>(b), static_cast<A*>(y), count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("add_relu_forward_kernel on ", count, " elements");
}

void add_relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype,
                       const void* d_main, DType d_main_dtype, void* dx, std::int64_t count,
                       cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(
      dy_dtype, d_main_dtype, "add_relu_backward", [&](auto d_type, auto m_type) {
        using D = decltype(d_type);
        using M = decltype(m_type);
        ALLOY_LAUNCH(add_relu_backward_kernel, grid_for(count), kThreads, 0, stream)
        (y, y_dtype, static_cast<const D*>(dy), static_cast<const M*>(d_main), static_cast<M*>(dx),
         count);
      });
  ALLOY_CUDA_CHECK_LAUNCH("add_relu_backward_kernel on ", count, " elements");
}

}  // namespace alloy::cuda
