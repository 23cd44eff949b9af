// Average and max pooling over NCHW inputs with square windows. They have no parameters and
// follow their input's dtype.
#pragma once

#include "core/nn/module.h"
#include "core/ops/pool2d.h"

namespace alloy::nn {

// stride 0 means stride = kernel.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int kernel, int stride = 0, int padding = 0);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "AvgPool2d"; }
  std::string options() const override;
  const Pool2dParams& params() const { return params_; }

 private:
  Pool2dParams params_;
  Shape x_shape_;  // all backward needs; empty outside a training step
};

// stride 0 means stride = kernel.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int kernel, int stride = 0, int padding = 0);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "MaxPool2d"; }
  std::string options() const override;

 private:
  Pool2dParams params_;
  Shape x_shape_;
  Tensor argmax_;  // where each output came from, until backward
};

}  // namespace alloy::nn
