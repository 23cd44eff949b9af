// Batch normalisation over the channels of NCHW inputs. Training mode normalises with the
// batch's statistics and updates the running ones; evaluation mode uses the running ones.
#pragma once

#include "core/nn/module.h"
#include "core/ops/batch_norm2d.h"

namespace alloy::nn {

class BatchNorm2d : public Module {
 public:
  // weight 1, bias 0 (both is_norm); running_mean 0, running_var 1.
  explicit BatchNorm2d(int channels, float momentum = 0.1f, float eps = 1e-5f);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  std::string options() const override;

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }
  Buffer& running_mean() { return running_mean_; }
  Buffer& running_var() { return running_var_; }

 private:
  Parameter& weight_;
  Parameter& bias_;
  Buffer& running_mean_;
  Buffer& running_var_;
  BatchNormParams params_;
  // Until backward: the input as normalised and the batch statistics.
  Tensor x_;
  BatchNormSaved saved_;
  DType input_dtype_ = DType::f32;
};

}  // namespace alloy::nn
