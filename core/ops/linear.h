// Fully connected layer: y = x w^T + b.
// x: [N, in], w: [out, in], b: [out] or undefined; all one floating dtype; y like x.
#pragma once

#include "core/tensor.h"

namespace alloy {

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b);

struct LinearGrads {
  Tensor dx;  // [N, in], x's dtype; undefined when not requested
};

// Accumulates into dw ([out, in]) and db ([out], may be undefined): dw += dy^T x, db += sum dy.
// dx is computed only when need_dx (the first layer of a network does not need it).
LinearGrads linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dw,
                            Tensor& db, bool need_dx);

namespace cpu {
// fp32 kernels over row-major arrays; b, db and dx may be null (no bias, no dx wanted), and so
// may dw (dx alone: x is not read).
void linear_forward(int batch, int in, int out, const float* x, const float* w, const float* b,
                    float* y);
void linear_backward(int batch, int in, int out, const float* x, const float* w, const float* dy,
                     float* dw, float* db, float* dx);
}  // namespace cpu

}  // namespace alloy
