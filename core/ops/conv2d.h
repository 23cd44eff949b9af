// 2-D convolution (cross-correlation, as in every framework), NCHW or channels-last.
// x: [N, C, H, W], w: [K, C, R, S], b: [K] or undefined; one floating dtype; y: [N, K, P, Q]
// with P = (H + 2 pad_h - R) / stride_h + 1. Accumulates in fp32; output rounded once.
// Layout::nhwc: x [N, H, W, C], y [N, P, Q, K] (dx and dy likewise); w and dw stay KCRS. The
// CPU runs it as the NCHW convolution of the permuted tensors (the same bits); CUDA natively.
#pragma once

#include "core/layout.h"
#include "core/tensor.h"

namespace alloy {

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& params,
                          Layout layout = Layout::nchw);

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& params,
                      Layout layout = Layout::nchw);

struct Conv2dGrads {
  Tensor dx;  // x's shape and dtype; undefined unless need_dx
};

// Accumulates dw += dL/dw and db += dL/db (db may be undefined).
Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw,
                            Tensor& db, const Conv2dParams& params, bool need_dx,
                            Layout layout = Layout::nchw);

namespace cpu {

// The sizes of one convolution, as the kernels take them.
struct Conv2dGeometry {
  int batch, channels, height, width;  // x
  int filters, kernel_h, kernel_w;     // w
  int out_h, out_w;                    // y
  Conv2dParams params;
  // The memory order of x, y, dx and dy for the CUDA kernels; the CPU kernels take NCHW only.
  Layout layout = Layout::nchw;
};

// Kernels over NCHW arrays, parallel over the batch, computing in fp32. x, y, dy and dx are
// storage of `dtype` (f32, f16 or bf16: widened and rounded per image); w, b, dw and db are
// fp32. b may be null.
void conv2d_forward(const Conv2dGeometry& g, const void* x, const float* w, const float* b, void* y,
                    DType dtype);
// dw += dL/dw and db += dL/db (db may be null); dx = dL/dx unless dx is null (then w may be
// null too). Batch reductions are combined in a fixed order: deterministic per thread count.
void conv2d_backward(const Conv2dGeometry& g, const void* x, const float* w, const void* dy,
                     float* dw, float* db, void* dx, DType dtype);

// The kernels conv2d_forward and conv2d_backward choose between: im2col + GEMM for any
// geometry, and Winograd (core/ops/cpu/conv2d_winograd.h) for 3x3 kernels at stride 1.
void conv2d_im2col_forward(const Conv2dGeometry& g, const void* x, const float* w, const float* b,
                           void* y, DType dtype);
void conv2d_im2col_backward(const Conv2dGeometry& g, const void* x, const float* w, const void* dy,
                            float* dw, float* db, void* dx, DType dtype);

}  // namespace cpu

// The geometry the kernels take for x (NCHW sizes, whatever `layout` the tensors are stored in)
// convolved with w.
cpu::Conv2dGeometry conv2d_geometry(const Shape& x, const Shape& w, const Conv2dParams& params,
                                    Layout layout = Layout::nchw);

}  // namespace alloy
