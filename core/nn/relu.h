// Rectified linear unit; follows its input's dtype.
#pragma once

#include "core/nn/module.h"

namespace alloy::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "ReLU"; }

 private:
  Tensor y_;  // backward needs the output only
};

}  // namespace alloy::nn
