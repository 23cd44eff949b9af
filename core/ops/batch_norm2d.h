// Batch normalisation over (N, H, W) per channel of an NCHW or NHWC (channels-last, physical
// shape [N, H, W, C]) tensor; the parameters are [C] in either layout. Statistics, the affine
// transform and every reduction run in fp32 whatever the storage dtype of x; weight, bias and
// the running statistics are f32 or x's dtype; y and dx have x's dtype. Reductions keep one
// partial per (n, c) plane and combine them in order, so results do not depend on threads.
#pragma once

#include <cstdint>

#include "core/layout.h"
#include "core/tensor.h"

namespace alloy {

struct BatchNormParams {
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch statistic
  float eps = 1e-5f;
  // y = max(0, normalised): the ReLU that follows fused into the forward's one pass (pair it
  // with a backward given y as relu_output). The same bits as relu_forward of the plain y.
  bool relu = false;
  // false: a training forward that leaves the running statistics as they are (the second
  // forward of a recomputed block, whose batch statistics the first forward already counted).
  bool update_running_statistics = true;
  // x's (and so y's) memory order; both forwards read it.
  Layout layout = Layout::nchw;
};

struct BatchNormSaved {
  Tensor mean;                   // f32 [C]: batch mean
  Tensor invstd;                 // f32 [C]: 1 / sqrt(biased batch variance + eps)
  Layout layout = Layout::nchw;  // the training forward's x layout: the backward's x, dy and dx
};

struct BatchNormTrainResult {
  Tensor y;
  BatchNormSaved saved;
};

// Training mode: normalises with batch statistics and updates running_mean and running_var
// (the unbiased variance, as PyTorch does) in place, unless params.update_running_statistics
// is false. Needs more than one value per channel.
BatchNormTrainResult batch_norm2d_train_forward(const Tensor& x, const Tensor& weight,
                                                const Tensor& bias, Tensor& running_mean,
                                                Tensor& running_var, const BatchNormParams& params);

// Evaluation mode: normalises with the running statistics.
Tensor batch_norm2d_eval_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 const BatchNormParams& params);

// Backward of the training-mode forward, in the layout the forward saved. Accumulates dweight and
// dbias; returns dx. dy may have any floating dtype. With relu_output defined (any floating dtype,
// x's shape: the fused forward's y, or the output of a ReLU applied later), dy counts only where
// relu_output > 0, as relu_backward would pass it, without materialising that masked gradient.
Tensor batch_norm2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy,
                             const BatchNormSaved& saved, Tensor& dweight, Tensor& dbias,
                             const Tensor& relu_output = Tensor());

namespace cpu {

// x as [batch, channels, plane] with plane = H * W.
struct BatchNormGeometry {
  std::int64_t batch = 0, channels = 0, plane = 0;
};

// Per channel: the mean and the biased variance (two passes, for accuracy).
void batch_norm2d_statistics(const void* x, DType dtype, const BatchNormGeometry& geometry,
                             float* mean, float* variance);
// y = x * scale[c] + shift[c], then max(0, y) with relu: both forwards reduce to this
// per-channel affine map.
void batch_norm2d_affine(const void* x, void* y, DType dtype, const BatchNormGeometry& geometry,
                         const float* scale, const float* shift, bool relu);

// The output of a ReLU after the batch norm: dy is used only where it is positive. A null data
// pointer means no mask.
struct ReluMask {
  const void* data = nullptr;
  DType dtype = DType::f32;
};

// Per channel: sum_dy = sum dy, sum_dy_xmu = sum dy * (x - mean), dy masked.
void batch_norm2d_backward_reduce(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                  ReluMask mask, const BatchNormGeometry& geometry,
                                  const float* mean, float* sum_dy, float* sum_dy_xmu);
// dx = (dy - sum_dy / M - (x - mean) * sum_dy_xmu * invstd^2 / M) * invstd * weight, in
// x's dtype, with M = batch * plane and dy masked.
void batch_norm2d_backward_dx(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                              ReluMask mask, void* dx, const BatchNormGeometry& geometry,
                              const float* mean, const float* invstd, const float* weight,
                              const float* sum_dy, const float* sum_dy_xmu);

// Copies a contiguous [n, a, b] tensor of element_bytes-sized elements to [n, b, a]: NCHW to
// NHWC with (a, b) = (C, H * W), back with (H * W, C). The CPU runs NHWC as the NCHW kernels on
// the transposed tensor, so both layouts give the same bits.
void batch_norm2d_transpose(const void* in, void* out, std::size_t element_bytes, std::int64_t n,
                            std::int64_t a, std::int64_t b);

}  // namespace cpu

}  // namespace alloy
