// [N, ...] -> [N, rest], a view; backward restores the input's shape.
#pragma once

#include "core/nn/module.h"

namespace alloy::nn {

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "Flatten"; }

 private:
  Shape x_shape_;
};

}  // namespace alloy::nn
