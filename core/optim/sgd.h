// Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay, with
// PyTorch's torch.optim.SGD semantics (dampening 0).
#pragma once

#include "core/optim/optimizer.h"

namespace alloy::optim {

class Sgd : public Optimizer {
 public:
  // Throws UsageError unless lr > 0, momentum in [0, 1), weight_decay >= 0, and nesterov only
  // with momentum > 0.
  Sgd(std::vector<nn::Parameter*> params, OptimizerConfig config);

  void step(float grad_scale, const Tensor& found_inf, const Tensor& grad_factor,
            const Tensor& grad_unscale) override;
  std::vector<StateTensor> state() override;

 private:
  Tensor& momentum_buffer(std::size_t index);

  std::vector<Tensor> momentum_;  // one per parameter; allocated on first use
};

}  // namespace alloy::optim
