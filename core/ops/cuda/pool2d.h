// CUDA twins of core/ops/pool2d.h's kernels, over the same geometry.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/pool2d.h"

namespace alloy::cuda {

using cpu::Pool2dGeometry;

// Same sums in the same order as the CPU kernels: bit-identical results.
void avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& geometry,
                        cudaStream_t stream);
void avg_pool2d_backward(const void* dy, void* dx, DType dtype, const Pool2dGeometry& geometry,
                         cudaStream_t stream);
// ReLU then a 2x2, stride-2 average pool in one pass each way (core/ops/pool2d.h).
void relu_avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& geometry,
                             cudaStream_t stream);
void relu_avg_pool2d_backward(const void* x, DType x_dtype, const void* dy, void* dx,
                              DType dy_dtype, const Pool2dGeometry& geometry, cudaStream_t stream);
void max_pool2d_forward(const void* x, void* y, std::int32_t* argmax, DType dtype,
                        const Pool2dGeometry& geometry, cudaStream_t stream);
// Scatters dy through argmax into an fp32 accumulator (dx itself when f32; otherwise
// `scratch`, which must hold planes * height * width floats) and rounds into dx. An argmax
// outside its plane is skipped (the CPU kernel throws; a kernel cannot).
void max_pool2d_backward(const void* dy, const std::int32_t* argmax, void* dx, float* scratch,
                         DType dtype, const Pool2dGeometry& geometry, cudaStream_t stream);

// The same over channels-last tensors ([N, H, W, C], `channels` = C, geometry.planes = N * C),
// with the same sums in the same order: bit-identical to the CPU kernels on permuted tensors.
// argmax keeps its NCHW meaning (h * W + w within the (n, c) plane) and y's physical shape. The
// max-pool backward adds each (n, c) plane's gradients in output order (no atomics), so
// overlapping windows give the CPU's sums exactly.
void avg_pool2d_forward_channels_last(const void* x, void* y, DType dtype,
                                      const Pool2dGeometry& geometry, std::int64_t channels,
                                      cudaStream_t stream);
void avg_pool2d_backward_channels_last(const void* dy, void* dx, DType dtype,
                                       const Pool2dGeometry& geometry, std::int64_t channels,
                                       cudaStream_t stream);
void max_pool2d_forward_channels_last(const void* x, void* y, std::int32_t* argmax, DType dtype,
                                      const Pool2dGeometry& geometry, std::int64_t channels,
                                      cudaStream_t stream);
void max_pool2d_backward_channels_last(const void* dy, const std::int32_t* argmax, void* dx,
                                       float* scratch, DType dtype, const Pool2dGeometry& geometry,
                                       std::int64_t channels, cudaStream_t stream);

}  // namespace alloy::cuda
