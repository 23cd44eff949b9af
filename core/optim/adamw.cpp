#include "core/optim/adamw.h"

#include "core/ops/optimizer_update.h"

namespace alloy::optim {

AdamW::AdamW(std::vector<nn::Parameter*> params, OptimizerConfig config)
    : Optimizer("adamw", std::move(params), std::move(config)),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()) {
  const OptimizerConfig& c = config_;
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f))
    usage_fail("adamw: beta1 must be in [0, 1), got ", c.beta1);
  if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f))
    usage_fail("adamw: beta2 must be in [0, 1), got ", c.beta2);
  if (!(c.eps > 0.0f)) usage_fail("adamw: eps must be > 0, got ", c.eps);
}

void AdamW::allocate_state(std::size_t index) {
  if (exp_avg_[index].defined()) return;
  const Tensor& value = params_[index]->value;
  for (auto* state : {&exp_avg_[index], &exp_avg_sq_[index]}) {
    *state =
        Tensor::zeros(value.shape(), DType::f32, value.device(), MemoryCategory::optimizer_state);
  }
}

void AdamW::step(float grad_scale, const Tensor& found_inf, const Tensor& grad_factor,
                 const Tensor& grad_unscale) {
  AdamWHyper hyper;
  hyper.beta1 = config_.beta1;
  hyper.beta2 = config_.beta2;
  hyper.eps = config_.eps;
  hyper.weight_decay = config_.weight_decay;
  hyper.grad_scale = grad_scale;
  hyper.rounding = {config_.stochastic_rounding, config_.rounding_key};
  std::vector<AdamWTensors> tensors, undecayed;
  tensors.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& param = *params_[i];
    if (!param.grad.defined()) continue;  // took no part in the loss
    allocate_state(i);
    const bool decays = !config_.decay_matrices_only || param.value.ndim() >= 2;
    (decays ? tensors : undecayed)
        .push_back({&param.value, &param.grad, &exp_avg_[i], &exp_avg_sq_[i], copy_of(i),
                    static_cast<std::uint32_t>(i)});
  }
  // The bias corrections come from the step count on the device, which this update advances
  // unless found_inf skips it.
  prepare_lr();
  AdamWHyper no_decay = hyper;
  no_decay.weight_decay = 0.0f;
  if (tensors.empty()) {
    adamw_update(undecayed, no_decay, lr_, step_, found_inf, grad_factor, grad_unscale);
    return;
  }
  if (!undecayed.empty()) {
    if (!group_step_.defined()) {
      group_step_ = Tensor::zeros(step_.shape(), step_.dtype(), step_.device(),
                                  MemoryCategory::optimizer_state);
    }
    group_step_.copy_from(step_);
    adamw_update(undecayed, no_decay, lr_, group_step_, found_inf, grad_factor, grad_unscale);
  }
  adamw_update(tensors, hyper, lr_, step_, found_inf, grad_factor, grad_unscale);
}

std::vector<StateTensor> AdamW::state() {
  std::vector<StateTensor> tensors;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    allocate_state(i);
    tensors.push_back({params_[i]->name + ".exp_avg", &exp_avg_[i]});
    tensors.push_back({params_[i]->name + ".exp_avg_sq", &exp_avg_sq_[i]});
  }
  return tensors;
}

}  // namespace alloy::optim
