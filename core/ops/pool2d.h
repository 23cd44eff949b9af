// Average and max pooling, NCHW, with kernel, stride and zero padding (at most half the
// kernel, as PyTorch requires). Average pooling divides by the full window (padding counts, as
// PyTorch's count_include_pad default). Output dtype is the input's; averages are summed in fp32
// and rounded once.
#pragma once

#include <cstdint>

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

// Ties pick the first maximum in row-major window order; NaN propagates (the first NaN wins).
MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& params);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& argmax, const Shape& x_shape);

namespace cpu {

// `planes` contiguous (n, c) planes of height x width in, out_height x out_width out.
struct Pool2dGeometry {
  std::int64_t planes = 0;
  int height = 0, width = 0;
  int out_height = 0, out_width = 0;
  Pool2dParams params;
};

void avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& geometry);
void avg_pool2d_backward(const void* dy, void* dx, DType dtype, const Pool2dGeometry& geometry);
void max_pool2d_forward(const void* x, void* y, std::int32_t* argmax, DType dtype,
                        const Pool2dGeometry& geometry);
// Throws when an argmax entry is outside its plane.
void max_pool2d_backward(const void* dy, const std::int32_t* argmax, void* dx, DType dtype,
                         const Pool2dGeometry& geometry);

}  // namespace cpu

}  // namespace alloy
