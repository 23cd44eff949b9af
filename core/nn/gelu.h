// Gaussian error linear unit (core/ops/gelu.h), as PyTorch's nn.GELU(approximate=...). O1's
// follow_input class: it computes in its input's dtype, whatever it is.
#pragma once

#include "core/nn/module.h"
#include "core/ops/gelu.h"

namespace alloy::nn {

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::none)
      : approximation_(approximation) {}

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "GELU"; }
  std::string options() const override;

  GeluApproximation approximation() const { return approximation_; }

 private:
  GeluApproximation approximation_;
  Tensor x_;  // backward needs the input
};

}  // namespace alloy::nn
