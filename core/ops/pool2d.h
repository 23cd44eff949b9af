// Average and max pooling, NCHW, with kernel, stride and zero padding. Average pooling
// divides by the full window (padding counts, as PyTorch's count_include_pad default).
// Output dtype is the input's; averages are summed in fp32 and rounded once.
#pragma once

#include "core/tensor.h"

namespace alloy {

struct Pool2dParams {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
};

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& params);

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& params);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& params);

struct MaxPoolResult {
  Tensor y;
  Tensor argmax;  // i32, y's shape: flat index within each (n, c) input plane
};

// Ties pick the first maximum in row-major window order; NaN propagates.
MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& params);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& argmax, const Shape& x_shape);

}  // namespace alloy
