// Winograd F(2x2, 3x3) convolution for the CPU: 3x3 kernels at stride 1, the layers that
// dominate a ResNet. Each 2x2 output tile costs 16 multiplies per (filter, channel) pair
// instead of 36, and all tiles of a block of images share one GEMM per transform point, which
// is a far better GEMM shape than one image's im2col. Lavin & Gray, "Fast Algorithms for
// Convolutional Neural Networks" (2016), give the transforms; training uses their adjoints:
//   forward:  Y_t  = A^T [ U .* V_t ] A        U = G g G^T,  V_t = B^T d_t B
//   weights:  dg   = G^T [ sum_t Yh_t .* V_t ] G             Yh_t = A dY_t A^T
//   data:     dd_t = B [ U .* Yh_t ] B^T, added into the overlapping 4x4 input windows
// Same arguments, dtypes and determinism as the im2col kernels in core/ops/conv2d.h. Rounding
// differs from them by a few ulps of the largest summand (the transforms add and subtract
// inputs before multiplying). Planes at most 8 wide run in conv2d_winograd_lanes.h, with 16
// images in the vector lanes (ResNet-18's 7x7 and 4x4 layers: rows of 2-4 tiles would fill
// few of a plane's lanes); wider ones run here, a plane at a time, tile rows in the lanes.
#pragma once

#include <cstdint>

#include "core/ops/conv2d.h"

namespace alloy::cpu {

// True for 3x3 kernels at stride 1 with padding 0-2, where these kernels apply.
bool winograd_supports(const Conv2dGeometry& g);

// True where conv2d_forward and conv2d_backward choose these kernels over im2col: supported
// geometries with enough channels and filters that the GEMMs, not the transforms, dominate.
bool winograd_preferred(const Conv2dGeometry& g);

void conv2d_winograd_forward(const Conv2dGeometry& g, const void* x, const float* w, const float* b,
                             void* y, DType dtype);
// The weight gradient is summed per group of images in the transform domain, one accumulator of
// 16 (K C + K) floats per group, and the accumulators combined in group order: one group per
// pool thread, or as many as `accumulator_budget_bytes` holds, at least one (then only that
// many threads work on the pass). A 512x512 layer's accumulator is 16 MiB: 64 threads' would
// be 1 GiB.
constexpr std::int64_t kWinogradAccumulatorBudget = std::int64_t{256} << 20;
int winograd_accumulators(const Conv2dGeometry& g, int threads,
                          std::int64_t accumulator_budget_bytes = kWinogradAccumulatorBudget);

void conv2d_winograd_backward(const Conv2dGeometry& g, const void* x, const float* w,
                              const void* dy, float* dw, float* db, void* dx, DType dtype,
                              std::int64_t accumulator_budget_bytes = kWinogradAccumulatorBudget);

}  // namespace alloy::cpu
