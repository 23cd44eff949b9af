// Batch normalisation over (N, H, W) per channel of an NCHW tensor. Statistics, the affine
// transform and every reduction run in fp32 whatever the storage dtype of x; weight, bias and
// the running statistics are f32 or x's dtype; y and dx have x's dtype.
#pragma once

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
// (the unbiased variance, as PyTorch does) in place.
BatchNormTrainResult batch_norm2d_train_forward(const Tensor& x, const Tensor& weight,
                                                const Tensor& bias, Tensor& running_mean,
                                                Tensor& running_var,
                                                const BatchNormParams& params);

// Evaluation mode: normalises with the running statistics.
Tensor batch_norm2d_eval_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 const Tensor& running_mean, const Tensor& running_var,
                                 const BatchNormParams& params);

// Backward of the training-mode forward. Accumulates dweight and dbias; returns dx.
Tensor batch_norm2d_backward(const Tensor& x, const Tensor& weight, const Tensor& dy,
                             const BatchNormSaved& saved, Tensor& dweight, Tensor& dbias);

}  // namespace alloy
