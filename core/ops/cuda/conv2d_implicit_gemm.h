// Alloy's implicit-GEMM convolutions: NCHW, fp32 sums, for f32, f16 and bf16 storage; the
// forward and the filter gradient, offered beside cuDNN's algorithms and the direct kernels
// (conv2d_direct.h) to measured selection.
//
// Why: LeNet's second convolution (20 channels, 50 5x5 filters) ran at about 4x its fp32
// multiply-add floor in the direct kernels, with 2.2 warps a scheduler and 6 loads and their
// address arithmetic beside every 32 multiply-adds of a thread, and cuDNN's fp32 algorithms did
// no better (docs/PERFORMANCE.md, the fourth and fifth runs). Here a block computes a tile of a
// matrix product from 16-deep slices of both operands staged in shared memory, and each thread
// keeps 4x4 independent sums in registers: 2 shared-memory reads for 16 multiply-adds, a patch
// value loaded once for 64 filters, and 5 warps a scheduler for LeNet's forward.
//
// The forward is the product of the input's patches [N*P*Q, C*R*S] (gathered from x as a slice
// is loaded, never stored) and the filters [C*R*S, K]. The filter gradient is dy [K, N*P*Q]
// times the patches; its positions are cut into chunks fixed by the shape, each chunk's partial
// sums go to a workspace and a second kernel adds them in chunk order. Every sum runs over its
// reduction index in order in fp32 and is rounded once: deterministic and the same on any GPU,
// but not the direct kernels' or cuDNN's bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/dtype.h"
#include "core/ops/conv2d.h"
#include "core/ops/cuda/conv2d_direct.h"

namespace alloy::cuda {

// Whether the implicit-GEMM kernels take `direction` of g (forward or filter; never data): NCHW,
// f32/f16/bf16, every tensor and the filter gradient's partial sums indexable in 32 bits, and
// for the forward at most 4096 taps a filter (C*R*S: each block keeps a table of their offsets
// in shared memory).
bool conv2d_igemm_supports(const cpu::Conv2dGeometry& g, DType dtype, ConvDirection direction);

// Bytes of workspace conv2d_igemm_filter needs: the chunks' fp32 partial gradients.
std::size_t conv2d_igemm_filter_workspace(const cpu::Conv2dGeometry& g);

// y = conv(x, w) + b (b may be null); x, w, b, y all `dtype`; fp32 sums, y rounded once.
void conv2d_igemm_forward(const cpu::Conv2dGeometry& g, DType dtype, const void* x, const void* w,
                          const void* b, void* y, cudaStream_t stream);

// dw = dL/dw, or dw += dL/dw when `accumulate` (one fp32 addition and one rounding per element);
// x, dy, dw all `dtype`. `workspace` holds at least conv2d_igemm_filter_workspace(g) bytes.
void conv2d_igemm_filter(const cpu::Conv2dGeometry& g, DType dtype, const void* x, const void* dy,
                         void* dw, bool accumulate, void* workspace, std::size_t workspace_bytes,
                         cudaStream_t stream);

}  // namespace alloy::cuda
