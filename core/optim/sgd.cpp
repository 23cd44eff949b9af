#include "core/optim/sgd.h"

#include "core/ops/optimizer_update.h"

namespace alloy::optim {

Sgd::Sgd(std::vector<nn::Parameter*> params, OptimizerConfig config)
    : Optimizer("sgd", std::move(params), std::move(config)), momentum_(params_.size()) {
  const OptimizerConfig& c = config_;
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) {
    usage_fail("sgd: momentum must be in [0, 1), got ", c.momentum);
  }
  if (c.nesterov && c.momentum == 0.0f) {
    usage_fail("sgd: nesterov momentum needs momentum > 0, got ", c.momentum);
  }
}

Tensor& Sgd::momentum_buffer(std::size_t index) {
  Tensor& buffer = momentum_[index];
  if (!buffer.defined()) {
    const Tensor& value = params_[index]->value;
    buffer =
        Tensor::zeros(value.shape(), DType::f32, value.device(), MemoryCategory::optimizer_state);
  }
  return buffer;
}

void Sgd::step(float grad_scale, const Tensor& found_inf, const Tensor& grad_factor,
               const Tensor& grad_unscale) {
  SgdHyper hyper;
  hyper.momentum = config_.momentum;
  hyper.weight_decay = config_.weight_decay;
  hyper.nesterov = config_.nesterov;
  hyper.grad_scale = grad_scale;
  hyper.rounding = {config_.stochastic_rounding, config_.rounding_key};
  std::vector<SgdTensors> tensors;
  tensors.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& param = *params_[i];
    if (!param.grad.defined()) continue;  // took no part in the loss
    // A zero buffer updated as usual equals PyTorch's first-step buffer = grad, and stays right
    // when found_inf skips that step without the host knowing.
    tensors.push_back({&param.value, &param.grad,
                       hyper.momentum > 0.0f ? &momentum_buffer(i) : nullptr, copy_of(i),
                       static_cast<std::uint32_t>(i)});
  }
  prepare_lr();
  sgd_update(tensors, hyper, lr_, step_, found_inf, grad_factor, grad_unscale);
}

std::vector<StateTensor> Sgd::state() {
  std::vector<StateTensor> tensors;
  if (config_.momentum == 0.0f) return tensors;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    tensors.push_back({params_[i]->name + ".momentum_buffer", &momentum_buffer(i)});
  }
  return tensors;
}

}  // namespace alloy::optim
