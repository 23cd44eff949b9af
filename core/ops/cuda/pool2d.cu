#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/elementwise.h"
#include "core/ops/cuda/pool2d.h"

namespace alloy::cuda {

namespace {

struct Geometry {
  std::int64_t planes;
  int height, width, out_height, out_width;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

Geometry device_geometry(const Pool2dGeometry& g) {
  const Pool2dParams& p = g.params;
  return {g.planes,   g.height,   g.width,    g.out_height, g.out_width, p.kernel_h,
          p.kernel_w, p.stride_h, p.stride_w, p.pad_h,      p.pad_w};
}

// One thread per output element; the window clipped to the input, summed in row-major order
// like the CPU kernel, divided by the full window (count_include_pad).
template <class T>
__global__ void avg_forward_kernel(const T* x, T* y, Geometry g) {
  const std::int64_t out_plane = std::int64_t{g.out_height} * g.out_width;
  const float divisor = static_cast<float>(g.kernel_h * g.kernel_w);
  ALLOY_GRID_STRIDE(index, g.planes * out_plane) {
    const std::int64_t plane = index / out_plane;
    const int oh = static_cast<int>(index % out_plane) / g.out_width;
    const int ow = static_cast<int>(index % out_plane) % g.out_width;
    const int h0 = max(oh * g.stride_h - g.pad_h, 0);
    const int h1 = min(oh * g.stride_h - g.pad_h + g.kernel_h, g.height);
    const int w0 = max(ow * g.stride_w - g.pad_w, 0);
    const int w1 = min(ow * g.stride_w - g.pad_w + g.kernel_w, g.width);
    const T* in = x + plane * g.height * g.width;
    float sum = 0.0f;
    for (int h = h0; h < h1; ++h) {
      for (int w = w0; w < w1; ++w)
        sum += widen(in[h * g.width + w]);
    }
    y[index] = narrow<T>(sum / divisor);
  }
}

// One thread per input element gathers the shares of the windows covering it, in the (oh, ow)
// order in which the CPU kernel scatters them: the same fp32 sums.
template <class T>
__global__ void avg_backward_kernel(const T* dy, T* dx, Geometry g) {
  const std::int64_t in_plane = std::int64_t{g.height} * g.width;
  const float divisor = static_cast<float>(g.kernel_h * g.kernel_w);
  ALLOY_GRID_STRIDE(index, g.planes * in_plane) {
    const std::int64_t plane = index / in_plane;
    const int h = static_cast<int>(index % in_plane) / g.width;
    const int w = static_cast<int>(index % in_plane) % g.width;
    // Windows oh with oh*stride - pad <= h < oh*stride - pad + kernel.
    const int oh_begin = max(0, (h + g.pad_h - g.kernel_h + g.stride_h) / g.stride_h);
    const int oh_end = min(g.out_height - 1, (h + g.pad_h) / g.stride_h);
    const int ow_begin = max(0, (w + g.pad_w - g.kernel_w + g.stride_w) / g.stride_w);
    const int ow_end = min(g.out_width - 1, (w + g.pad_w) / g.stride_w);
    const T* grad = dy + plane * g.out_height * g.out_width;
    float sum = 0.0f;
    for (int oh = oh_begin; oh <= oh_end; ++oh) {
      for (int ow = ow_begin; ow <= ow_end; ++ow) {
        sum += widen(grad[oh * g.out_width + ow]) / divisor;
      }
    }
    dx[index] = narrow<T>(sum);
  }
}

template <class T>
__global__ void max_forward_kernel(const T* x, T* y, std::int32_t* argmax, Geometry g) {
  const std::int64_t out_plane = std::int64_t{g.out_height} * g.out_width;
  ALLOY_GRID_STRIDE(index, g.planes * out_plane) {
    const std::int64_t plane = index / out_plane;
    const int oh = static_cast<int>(index % out_plane) / g.out_width;
    const int ow = static_cast<int>(index % out_plane) % g.out_width;
    const int h0 = max(oh * g.stride_h - g.pad_h, 0);
    const int h1 = min(oh * g.stride_h - g.pad_h + g.kernel_h, g.height);
    const int w0 = max(ow * g.stride_w - g.pad_w, 0);
    const int w1 = min(ow * g.stride_w - g.pad_w + g.kernel_w, g.width);
    const T* in = x + plane * g.height * g.width;
    int best_index = h0 * g.width + w0;
    float best = widen(in[best_index]);
    for (int h = h0; h < h1; ++h) {
      for (int w = w0; w < w1; ++w) {
        const float value = widen(in[h * g.width + w]);
        // Strictly greater keeps the first maximum; the first NaN replaces any number.
        if (value > best || (value != value && best == best)) {
          best = value;
          best_index = h * g.width + w;
        }
      }
    }
    y[index] = in[best_index];  // the stored value itself: exact
    argmax[index] = best_index;
  }
}

__global__ void max_backward_scatter_kernel(const void* dy, DType dtype, const std::int32_t* argmax,
                                            float* result, Geometry g) {
  const std::int64_t out_plane = std::int64_t{g.out_height} * g.out_width;
  const std::int64_t in_plane = std::int64_t{g.height} * g.width;
  ALLOY_GRID_STRIDE(index, g.planes * out_plane) {
    const std::int32_t target = argmax[index];
    if (target < 0 || target >= in_plane) continue;
    // Overlapping windows may send two gradients to one input: fp32 atomics, so with overlap
    // the order of those additions (not their set) can vary between runs.
    atomicAdd(result + (index / out_plane) * in_plane + target, load_any(dy, dtype, index));
  }
}

}  // namespace

void avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& geometry,
                        cudaStream_t stream) {
  const Geometry g = device_geometry(geometry);
  const std::int64_t count = g.planes * g.out_height * g.out_width;
  if (count == 0) return;
  dispatch_floating(dtype, "avg_pool2d_forward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(avg_forward_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const T*>(x), static_cast<T*>(y), g);
  });
  ALLOY_CUDA_CHECK_LAUNCH("avg_forward_kernel on ", count, " outputs");
}

void avg_pool2d_backward(const void* dy, void* dx, DType dtype, const Pool2dGeometry& geometry,
                         cudaStream_t stream) {
  const Geometry g = device_geometry(geometry);
  const std::int64_t count = g.planes * g.height * g.width;
  if (count == 0) return;
  dispatch_floating(dtype, "avg_pool2d_backward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(avg_backward_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const T*>(dy), static_cast<T*>(dx), g);
  });
  ALLOY_CUDA_CHECK_LAUNCH("avg_backward_kernel on ", count, " inputs");
}

void max_pool2d_forward(const void* x, void* y, std::int32_t* argmax, DType dtype,
                        const Pool2dGeometry& geometry, cudaStream_t stream) {
  const Geometry g = device_geometry(geometry);
  const std::int64_t count = g.planes * g.out_height * g.out_width;
  if (count == 0) return;
  dispatch_floating(dtype, "max_pool2d_forward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(max_forward_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const T*>(x), static_cast<T*>(y), argmax, g);
  });
  ALLOY_CUDA_CHECK_LAUNCH("max_forward_kernel on ", count, " outputs");
}

void max_pool2d_backward(const void* dy, const std::int32_t* argmax, void* dx, float* scratch,
                         DType dtype, const Pool2dGeometry& geometry, cudaStream_t stream) {
  const Geometry g = device_geometry(geometry);
  const std::int64_t inputs = g.planes * g.height * g.width;
  const std::int64_t outputs = g.planes * g.out_height * g.out_width;
  if (inputs == 0) return;
  float* result = dtype == DType::f32 ? static_cast<float*>(dx) : scratch;
  ALLOY_CHECK(result != nullptr, "max_pool2d_backward: half gradients need an fp32 scratch");
  ALLOY_CUDA_CHECK(
      cudaMemsetAsync(result, 0, static_cast<std::size_t>(inputs) * sizeof(float), stream),
      "clearing max_pool2d_backward's accumulator of ", inputs, " floats");
  if (outputs > 0) {
    ALLOY_LAUNCH(max_backward_scatter_kernel, grid_for(outputs), kThreads, 0, stream)
    (dy, dtype, argmax, result, g);
    ALLOY_CUDA_CHECK_LAUNCH("max_backward_scatter_kernel on ", outputs, " outputs");
  }
  if (result != dx) cast(result, DType::f32, dx, dtype, inputs, stream);
}

}  // namespace alloy::cuda
