// Adam with decoupled weight decay (Loshchilov & Hutter), with PyTorch's torch.optim.AdamW
// semantics.
#pragma once

#include "core/optim/optimizer.h"

namespace alloy::optim {

class AdamW : public Optimizer {
 public:
  // Throws UsageError unless lr > 0, weight_decay >= 0, betas in [0, 1) and eps > 0.
  AdamW(std::vector<nn::Parameter*> params, OptimizerConfig config);

  void step(float grad_scale, const Tensor& found_inf, const Tensor& grad_factor,
            const Tensor& grad_unscale) override;
  std::vector<StateTensor> state() override;

 private:
  void allocate_state(std::size_t index);

  // One of each per parameter; allocated on first use.
  std::vector<Tensor> exp_avg_;
  std::vector<Tensor> exp_avg_sq_;
  // With decay_matrices_only, the parameters without decay are updated first, from a copy of
  // the step count, so both groups see the same step in their bias corrections.
  Tensor group_step_;
};

}  // namespace alloy::optim
