// Fully connected layer y = x w^T + b over [N, in] inputs.
#pragma once

#include "core/nn/module.h"

namespace alloy::nn {

class Linear : public Module {
 public:
  // Parameters start at zero: models choose the initialisation.
  Linear(int in_features, int out_features, bool bias = true);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Linear"; }

  Parameter& weight() { return weight_; }
  Parameter* bias() { return bias_; }

 private:
  Parameter& weight_;
  Parameter* bias_ = nullptr;
  Tensor x_;  // the input in the compute dtype, until backward
  DType input_dtype_ = DType::f32;
  DType compute_dtype_ = DType::f32;
};

}  // namespace alloy::nn
