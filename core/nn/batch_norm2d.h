// Batch normalisation over the channels of NCHW inputs. Training mode normalises with the
// batch's statistics and updates the running ones; evaluation mode uses the running ones.
// With fuse_relu it is batch norm followed by a ReLU, in one pass each way (the same bits as the
// two modules); the parameters and buffers are the same either way.
#pragma once

#include "core/nn/module.h"
#include "core/ops/batch_norm2d.h"

namespace alloy::nn {

class BatchNorm2d : public Module {
 public:
  // weight 1, bias 0 (both is_norm); running_mean 0, running_var 1.
  explicit BatchNorm2d(int channels, float momentum = 0.1f, float eps = 1e-5f,
                       bool fuse_relu = false);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  // Backward when a ReLU outside this module consumed its output and gave relu_output (kept by
  // the caller, e.g. a residual block's sum): dy is masked inside the kernels, so relu_backward's
  // tensor never exists. Not for a module with fuse_relu, whose backward masks with its own
  // output.
  Tensor backward_through_relu(const Tensor& dy, const Tensor& relu_output);
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string options() const override;

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  Buffer& running_mean() { return running_mean_; }
  Buffer& running_var() { return running_var_; }

 private:
  // relu_output undefined: plain batch norm.
  Tensor backward_masked(const Tensor& dy, const Tensor& relu_output);

  Parameter& weight_;
  Parameter& bias_;
  Buffer& running_mean_;
  Buffer& running_var_;
  BatchNormParams params_;
  // Until backward: the input as normalised and the batch statistics; with fuse_relu also the
  // output, whose sign is the ReLU's mask (it is the next layer's saved input anyway).
  Tensor x_;
  Tensor y_;
  BatchNormSaved saved_;
  DType input_dtype_ = DType::f32;
};

}  // namespace alloy::nn
