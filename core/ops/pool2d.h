// Average and max pooling, NCHW, with kernel, stride and zero padding (at most half the
// kernel, as PyTorch requires). Average pooling divides by the full window (padding counts, as
// PyTorch's count_include_pad default). Output dtype is the input's; averages are summed in fp32
// and rounded once. Layout::nhwc: x, y, dx and dy channels-last ([N, H, W, C]), the same values
// as NCHW pooling of the permuted tensors, bit for bit (the CPU permutes around its NCHW
// kernels; CUDA has native kernels summing in the same order).
#pragma once

#include <cstdint>

#include "core/layout.h"
#include "core/tensor.h"

namespace alloy {

struct Pool2dParams {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
};

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& params, Layout layout = Layout::nchw);

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& params,
                          Layout layout = Layout::nchw);
// x_shape is x's physical shape (in `layout`).
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& x_shape, const Pool2dParams& params,
                           Layout layout = Layout::nchw);

// Whether the windows are 2x2 at stride 2 without padding (LeNet's): each input under at most
// one window, every window inside the input.
bool pool2d_halves(const Pool2dParams& params);

// ReLU then average pooling over such halving windows, NCHW, as one pass each way: the same values
// and bits as relu_forward then avg_pool2d_forward, and as avg_pool2d_backward then relu_backward,
// without the ReLU's output or the pool's input gradient in memory (on LeNet's first layer, 13.8 MB
// a batch, written and read again each way).
bool relu_avg_pool2d_fuses(const Pool2dParams& params, Layout layout);
Tensor relu_avg_pool2d_forward(const Tensor& x, const Pool2dParams& params);
// dx = dL/dx, ReLU's input's gradient, from x (ReLU's input: positive exactly where its output
// is) and dy, the pool output's gradient; dx has dy's dtype.
Tensor relu_avg_pool2d_backward(const Tensor& x, const Tensor& dy, const Pool2dParams& params);

struct MaxPoolResult {
  Tensor y;
  // i32, y's (physical) shape: flat index h * W + w within each (n, c) input plane, whatever
  // the layout.
  Tensor argmax;
};

// Ties pick the first maximum in row-major window order; NaN propagates (the first NaN wins).
MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& params,
                                 Layout layout = Layout::nchw);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& argmax, const Shape& x_shape,
                           Layout layout = Layout::nchw);

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
void relu_avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& geometry);
void relu_avg_pool2d_backward(const void* x, DType x_dtype, const void* dy, void* dx,
                              DType dy_dtype, const Pool2dGeometry& geometry);
void max_pool2d_forward(const void* x, void* y, std::int32_t* argmax, DType dtype,
                        const Pool2dGeometry& geometry);
// Throws when an argmax entry is outside its plane.
void max_pool2d_backward(const void* dy, const std::int32_t* argmax, void* dx, DType dtype,
                         const Pool2dGeometry& geometry);

}  // namespace cpu

}  // namespace alloy
