#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/elementwise.h"

namespace alloy::cuda {

namespace {

template <class X, class Y>
__global__ void cast_kernel(const X* x, Y* y, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    y[i] = narrow<Y>(widen(x[i]));
  }
}

template <class A, class B>
__global__ void add_kernel(const A* a, const B* b, A* y, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    y[i] = narrow<A>(widen(a[i]) + widen(b[i]));
  }
}

template <class X, class Y>
__global__ void axpby_kernel(float alpha, const X* x, float beta, Y* y, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    // beta == 0 never reads y, so NaN or garbage there does not leak through.
    const float scaled = alpha * widen(x[i]);
    y[i] = narrow<Y>(beta == 0.0f ? scaled : __fadd_rn(scaled, beta * widen(y[i])));
  }
}

template <class T>
__global__ void scale_kernel(T* x, float alpha, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    x[i] = narrow<T>(widen(x[i]) * alpha);
  }
}

template <class T>
__global__ void normalize_kernel(const std::uint8_t* images, T* y, std::int64_t count) {
  // Correctly rounded division (no fast math), as the CPU's table of value / 255.0f.
  ALLOY_GRID_STRIDE(i, count) {
    y[i] = narrow<T>(static_cast<float>(images[i]) / 255.0f);
  }
}

}  // namespace

void cast(const void* x, DType x_dtype, void* y, DType y_dtype, std::int64_t count,
          cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(x_dtype, y_dtype, "cast", [&](auto x_type, auto y_type) {
    using X = decltype(x_type);
    using Y = decltype(y_type);
    ALLOY_LAUNCH(cast_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const X*>(x), static_cast<Y*>(y), count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("cast_kernel ", dtype_name(x_dtype), "->", dtype_name(y_dtype), " on ",
                          count, " elements");
}

void add(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y, std::int64_t count,
         cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(a_dtype, b_dtype, "add", [&](auto a_type, auto b_type) {
    using A = decltype(a_type);
    using B = decltype(b_type);
    ALLOY_LAUNCH(add_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const A*>(a), static_cast<const B*>(b), static_cast<A*>(y), count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("add_kernel on ", count, " elements");
}

void axpby(float alpha, const void* x, DType x_dtype, float beta, void* y, DType y_dtype,
           std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(x_dtype, y_dtype, "axpby", [&](auto x_type, auto y_type) {
    using X = decltype(x_type);
    using Y = decltype(y_type);
    ALLOY_LAUNCH(axpby_kernel, grid_for(count), kThreads, 0, stream)
    (alpha, static_cast<const X*>(x), beta, static_cast<Y*>(y), count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("axpby_kernel on ", count, " elements");
}

void scale(void* x, DType dtype, float alpha, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "scale", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(scale_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<T*>(x), alpha, count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("scale_kernel on ", count, " elements");
}

void normalize_images(const std::uint8_t* images, void* y, DType dtype, std::int64_t count,
                      cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "normalize_images", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(normalize_kernel, grid_for(count), kThreads, 0, stream)
    (images, static_cast<T*>(y), count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("normalize_kernel on ", count, " elements");
}

}  // namespace alloy::cuda
