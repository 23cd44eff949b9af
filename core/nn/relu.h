// Rectified linear unit; follows its input's dtype.
#pragma once

#include "core/nn/module.h"

namespace alloy::nn {

class AvgPool2d;

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "ReLU"; }

  // This ReLU and the average pool after it as one pass each way, where relu_avg_pool2d_fuses
  // the pool (core/ops/pool2d.h; a Sequential calls these for such a pair): forward returns the
  // pool's output and keeps x, which is positive exactly where the ReLU's output is, so the
  // backward selects the same gradients as backward would.
  Tensor forward_with_pool(const AvgPool2d& pool, const Tensor& x);
  Tensor backward_with_pool(const AvgPool2d& pool, const Tensor& dy);

 private:
  Tensor kept_;  // backward needs where the output is positive: the output, or the input fused
};

}  // namespace alloy::nn
