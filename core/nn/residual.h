// A residual connection around any body whose output has its input's shape:
// y = x + body(x), dx = dy + body.backward(dy) (a transformer's sublayers, say). Mixed dtypes
// promote (O1's promote class): an fp32 input meeting a half body output adds in fp32. The
// body is the child "body", so its parameters are named "body.*" under this module.
#pragma once

#include <memory>

#include "core/nn/module.h"

namespace alloy::nn {

class Residual : public Module {
 public:
  explicit Residual(std::unique_ptr<Module> body);

  Tensor forward(const Tensor& x) override;
  // The body gets dy in its output's dtype; dx has the input's dtype.
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Residual"; }
  bool is_block() const override { return true; }

  Module& body() { return body_; }

 private:
  Module& body_;
  // Until backward: whether the forward was one that keeps what backward needs (the body
  // keeps its own activations; the sum needs none).
  bool kept_ = false;
  DType input_dtype_ = DType::f32;
  DType body_dtype_ = DType::f32;
};

}  // namespace alloy::nn
