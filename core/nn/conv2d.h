// 2-D convolution over NCHW inputs with square kernels, strides and zero padding.
#pragma once

#include "core/nn/module.h"
#include "core/ops/conv2d.h"

namespace alloy::nn {

class Conv2d : public Module {
 public:
  // Parameters start at zero: models choose the initialisation.
  Conv2d(int in_channels, int out_channels, int kernel, int stride = 1, int padding = 0,
         bool bias = true);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string options() const override;

  Parameter& weight() { return weight_; }
  Parameter* bias() { return bias_; }

 private:
  Parameter& weight_;
  Parameter* bias_ = nullptr;
  Conv2dParams params_;
  Tensor x_;  // the input in the compute dtype, until backward
  DType input_dtype_ = DType::f32;
  DType compute_dtype_ = DType::f32;
};

}  // namespace alloy::nn
