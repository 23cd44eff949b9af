// 2-D convolution (cross-correlation, as in every framework), NCHW.
// x: [N, C, H, W], w: [K, C, R, S], b: [K] or undefined; one floating dtype; y: [N, K, P, Q]
// with P = (H + 2 pad_h - R) / stride_h + 1. Accumulates in fp32; output rounded once.
#pragma once

#include "core/tensor.h"

namespace alloy {

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& params);

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                      const Conv2dParams& params);

struct Conv2dGrads {
  Tensor dx;  // x's shape and dtype; undefined unless need_dx
};

// Accumulates dw += dL/dw and db += dL/db (db may be undefined).
Conv2dGrads conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw,
                            Tensor& db, const Conv2dParams& params, bool need_dx);

}  // namespace alloy
