#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/elementwise.h"

namespace alloy::cuda {

namespace {

// Each kernel maps storage values to storage values (map_elements: 16-byte accesses where the
// pointers allow), with one fp32 operation and one rounding per element.
template <class X, class Y>
__global__ void cast_kernel(const X* x, Y* y, std::int64_t count, bool packed) {
  map_elements([](X value) { return narrow<Y>(widen(value)); }, count, packed, y, x);
}

template <class A, class B>
__global__ void add_kernel(const A* a, const B* b, A* y, std::int64_t count, bool packed) {
  map_elements([](A u, B v) { return narrow<A>(widen(u) + widen(v)); }, count, packed, y, a, b);
}

template <class X, class Y>
__global__ void axpby_kernel(float alpha, const X* x, float beta, Y* y, std::int64_t count,
                             bool packed) {
  // beta == 0 never reads y, so NaN or garbage there does not leak through.
  if (beta == 0.0f) {
    map_elements([alpha](X u) { return narrow<Y>(alpha * widen(u)); }, count, packed, y, x);
  } else {
    map_elements(
        [alpha, beta](X u, Y v) { return narrow<Y>(__fadd_rn(alpha * widen(u), beta * widen(v))); },
        count, packed, y, x, static_cast<const Y*>(y));
  }
}

template <class T>
__global__ void scale_kernel(T* x, float alpha, std::int64_t count, bool packed) {
  map_elements([alpha](T value) { return narrow<T>(widen(value) * alpha); }, count, packed, x,
               static_cast<const T*>(x));
}

template <class T>
__global__ void normalize_kernel(const std::uint8_t* images, T* y, std::int64_t count,
                                 bool packed) {
  // Correctly rounded division (no fast math), as the CPU's table of value / 255.0f.
  map_elements([](std::uint8_t value) { return narrow<T>(static_cast<float>(value) / 255.0f); },
               count, packed, y, images);
}

}  // namespace

void cast(const void* x, DType x_dtype, void* y, DType y_dtype, std::int64_t count,
          cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(x_dtype, y_dtype, "cast", [&](auto x_type, auto y_type) {
    using X = decltype(x_type);
    using Y = decltype(y_type);
    const auto* from = static_cast<const X*>(x);
    auto* to = static_cast<Y*>(y);
    const MapLaunch launch = map_launch(count, to, from);
    ALLOY_LAUNCH(cast_kernel, launch.grid, kThreads, 0, stream)(from, to, count, launch.packed);
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
    const auto* left = static_cast<const A*>(a);
    const auto* right = static_cast<const B*>(b);
    auto* sum = static_cast<A*>(y);
    const MapLaunch launch = map_launch(count, sum, left, right);
    ALLOY_LAUNCH(add_kernel, launch.grid, kThreads, 0, stream)
    (left, right, sum, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("add_kernel on ", count, " elements");
}

void axpby(float alpha, const void* x, DType x_dtype, float beta, void* y, DType y_dtype,
           std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating_pair(x_dtype, y_dtype, "axpby", [&](auto x_type, auto y_type) {
    using X = decltype(x_type);
    using Y = decltype(y_type);
    const auto* from = static_cast<const X*>(x);
    auto* to = static_cast<Y*>(y);
    const MapLaunch launch = map_launch(count, to, from);
    ALLOY_LAUNCH(axpby_kernel, launch.grid, kThreads, 0, stream)
    (alpha, from, beta, to, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("axpby_kernel on ", count, " elements");
}

void scale(void* x, DType dtype, float alpha, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "scale", [&](auto type) {
    using T = decltype(type);
    auto* data = static_cast<T*>(x);
    const MapLaunch launch = map_launch(count, data);
    ALLOY_LAUNCH(scale_kernel, launch.grid, kThreads, 0, stream)(data, alpha, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("scale_kernel on ", count, " elements");
}

void normalize_images(const std::uint8_t* images, void* y, DType dtype, std::int64_t count,
                      cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "normalize_images", [&](auto type) {
    using T = decltype(type);
    auto* to = static_cast<T*>(y);
    const MapLaunch launch = map_launch(count, to, images);
    ALLOY_LAUNCH(normalize_kernel, launch.grid, kThreads, 0, stream)
    (images, to, count, launch.packed);
  });
  ALLOY_CUDA_CHECK_LAUNCH("normalize_kernel on ", count, " elements");
}

}  // namespace alloy::cuda
