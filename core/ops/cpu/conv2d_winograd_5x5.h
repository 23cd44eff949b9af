// Winograd F(2x2, 5x5) convolution for the CPU: 5x5 kernels at stride 1, such as LeNet's
// second layer (20 channels, 50 filters), whose im2col GEMMs were most of a LeNet step on the
// CPU. Each 2x2 output tile costs 36 multiplies per (filter, channel) pair instead of 100:
//   Y_t = A^T [ U .* V_t ] A,   U = G g G^T,   V_t = B^T d_t B
// with the Toom-Cook matrices at the points 0, 1, -1, 2, -2 and infinity (d_t the tile's 6x6
// input window). The transforms run over 16 images at once, one in each vector lane of a
// transposed copy of the block's planes, and each of the 36 points is one GEMM of the filters'
// and the blocks' transformed tiles (conv2d_winograd_lanes.h, shared with the 3x3 kernels on
// small planes). The weight gradient sums into accumulators as conv2d_winograd.h describes.
// Rounding differs from im2col's by a few ulps of the largest transformed summand (the transforms
// add and scale inputs by up to 5 before multiplying). Same arguments, dtypes and determinism as
// the im2col kernels in core/ops/conv2d.h.
#pragma once

#include "core/ops/conv2d.h"

namespace alloy::cpu {

// True for 5x5 kernels at stride 1 with padding 0-4, where this kernel applies.
bool winograd_5x5_supports(const Conv2dGeometry& g);

// True where conv2d_forward and conv2d_backward choose it over im2col: supported geometries with
// enough channels and filters that the GEMMs, not the transforms, dominate.
bool winograd_5x5_preferred(const Conv2dGeometry& g);

void conv2d_winograd_5x5_forward(const Conv2dGeometry& g, const void* x, const float* w,
                                 const float* b, void* y, DType dtype);

// dw += dL/dw (summed per thread in the transform domain, the threads' sums added in thread
// order), db += dL/db (db may be null), dx = dL/dx unless dx is null, by the transposed
// algorithm: Yh = A dY A^T per tile, dU = sum over tiles of Yh .* V, dw = G^T dU G, and
// B (U .* Yh) B^T added into the overlapping windows of dx.
void conv2d_winograd_5x5_backward(const Conv2dGeometry& g, const void* x, const float* w,
                                  const void* dy, float* dw, float* db, void* dx, DType dtype);

}  // namespace alloy::cpu
