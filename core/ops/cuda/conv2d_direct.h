// Alloy's own direct convolutions, for small ones: few taps per filter (C*R*S) and few filters,
// such as LeNet's and a 1-channel stem. There cuDNN's fp32 algorithms take ten times or more
// what the memory traffic needs (a [256, 1, 28, 28] input's 20 filters) or run FFTs for a 5x5
// filter of 20 channels. The forward and the input gradient give each thread 4 positions x 8
// outputs (filters, or input channels for dx) from a tile of taps in shared memory: each tap's
// 8 values (read as a broadcast, which costs a shared-memory wavefront per value) then serve 32
// fused multiply-adds. The filter gradient splits the batch into a fixed number of chunks;
// filters of at most 9 taps give each thread every tap's 8 sums over a share of the chunk's
// positions, larger ones a tap to each thread; each chunk's sums are added in a fixed order and
// the chunks' partials in chunk order. Every sum runs in a fixed order in fp32 and is rounded
// once: deterministic, run to run and for any GPU.
//
// NCHW only; conv2d.cu offers them as one more algorithm per direction (kDirectAlgorithm; the
// forward's two kernels as two, DirectForward), which --conv-algorithms measured times against
// cuDNN's, so they run only where they are faster.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"
#include "core/ops/conv2d.h"

namespace alloy::cuda {

enum class ConvDirection { forward, data, filter };

// What every one of Alloy's convolution kernels needs (these and conv2d_implicit_gemm.h's): NCHW,
// f32/f16/bf16, and x and y not empty and indexable in 32 bits.
bool conv2d_kernels_take(const cpu::Conv2dGeometry& g, DType dtype);

// Whether the direct kernels take `direction` of g: NCHW, f32/f16/bf16, every tensor indexable
// in 32 bits, the filter tile within a block's shared memory (C*R*S <= 1536 for the forward and
// the filter gradient, K*R*S <= 1536 and stride 1 for the input gradient) and, for the filter
// gradient, an output plane of at most 1536 positions; the input gradient also needs stride 1
// and padding of at most R-1 rows and S-1 columns.
bool conv2d_direct_supports(const cpu::Conv2dGeometry& g, DType dtype, ConvDirection direction);

// Bytes of workspace conv2d_direct_data needs: dy padded to (H+R-1) x (W+S-1), in `dtype`.
std::size_t conv2d_direct_data_workspace(const cpu::Conv2dGeometry& g, DType dtype);

// Bytes of workspace conv2d_direct_filter needs: the chunks' fp32 partial gradients.
std::size_t conv2d_direct_filter_workspace(const cpu::Conv2dGeometry& g);

// The forward's two kernels: `streaming` sums every channel in one thread, in (c, r, s) order;
// `split_channels` gives each of 4 warp groups of a block a quarter of the channels (4x the
// warps for small grids) and adds their sums in a fixed order: deterministic, other bits.
// conv2d.cu offers both, where the second applies, to measured selection.
enum class DirectForward { streaming, split_channels };

// Whether the split_channels forward takes g: what the forward takes, with at least 4 channels
// and C*R*S <= 512 (its tile and its partial sums within a block's shared memory).
bool conv2d_direct_splits(const cpu::Conv2dGeometry& g, DType dtype);

// y = conv(x, w) + b (b may be null); x, w, b, y all `dtype`; fp32 sums, y rounded once.
void conv2d_direct_forward(const cpu::Conv2dGeometry& g, DType dtype, const void* x, const void* w,
                           const void* b, void* y, cudaStream_t stream,
                           DirectForward variant = DirectForward::streaming);

// dx = dL/dx from dy and w (all `dtype`); stride 1. Computed as the forward kernel over dy
// padded into `workspace` (at least conv2d_direct_data_workspace(g, dtype) bytes) with the
// filters' taps flipped, so that no tap checks its bounds.
void conv2d_direct_data(const cpu::Conv2dGeometry& g, DType dtype, const void* w, const void* dy,
                        void* dx, void* workspace, std::size_t workspace_bytes,
                        cudaStream_t stream);

// dw = dL/dw, or dw += dL/dw when `accumulate` (one fp32 addition and one rounding per element);
// x, dy, dw all `dtype`. `workspace` holds at least conv2d_direct_filter_workspace(g) bytes.
void conv2d_direct_filter(const cpu::Conv2dGeometry& g, DType dtype, const void* x, const void* dy,
                          void* dw, bool accumulate, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream);

}  // namespace alloy::cuda
