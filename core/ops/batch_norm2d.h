// Batch normalisation over (N, H, W) per channel of an NCHW tensor. Statistics, the affine
// transform and every reduction run in fp32 whatever the storage dtype of x; weight, bias and
// the running statistics are f32 or x's dtype; y and dx have x's dtype. Reductions keep one
// partial per (n, c) plane and combine them in order, so results do not depend on threads.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

struct BatchNormParams {
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch statistic
  float eps = 1e-5f;
};

struct BatchNormSaved {
  Tensor mean;    // f32 [C]: batch mean
  Tensor invstd;  // f32 [C]: 1 / sqrt(biased batch variance + eps)
};

struct BatchNormTrainResult {
  Tensor y;
  BatchNormSaved saved;
};

// Training mode: normalises with batch statistics and updates running_mean and running_var
// (the unbiased variance, as PyTorch does) in place. Needs more than one value per channel.
BatchNormTrainResult batch_norm2d_train_forward(const Tensor& x, const Tensor& weight,
                                                const Tensor& bias, Tensor& running_mean,
                                                Tensor& running_var, const BatchNormParams& params);

// Evaluation mode: normalises with the running statistics.
Tensor batch_norm2d_eval_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 const BatchNormParams& params);

// Backward of the training-mode forward. Accumulates dweight and dbias; returns dx. dy may
// have any floating dtype.
Tensor batch_norm2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy,
                             const BatchNormSaved& saved, Tensor& dweight, Tensor& dbias);

namespace cpu {

// x as [batch, channels, plane] with plane = H * W.
struct BatchNormGeometry {
  std::int64_t batch = 0, channels = 0, plane = 0;
};

// Per channel: the mean and the biased variance (two passes, for accuracy).
void batch_norm2d_statistics(const void* x, DType dtype, const BatchNormGeometry& geometry,
                             float* mean, float* variance);
// y = x * scale[c] + shift[c]: both forwards reduce to this per-channel affine map.
void batch_norm2d_affine(const void* x, void* y, DType dtype, const BatchNormGeometry& geometry,
                         const float* scale, const float* shift);
// Per channel: sum_dy = sum dy, sum_dy_xmu = sum dy * (x - mean).
void batch_norm2d_backward_reduce(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                  const BatchNormGeometry& geometry, const float* mean,
                                  float* sum_dy, float* sum_dy_xmu);
// dx = (dy - sum_dy / M - (x - mean) * sum_dy_xmu * invstd^2 / M) * invstd * weight, in
// x's dtype, with M = batch * plane.
void batch_norm2d_backward_dx(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                              void* dx, const BatchNormGeometry& geometry, const float* mean,
                              const float* invstd, const float* weight, const float* sum_dy,
                              const float* sum_dy_xmu);

}  // namespace cpu

}  // namespace alloy
