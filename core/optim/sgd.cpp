#include "core/optim/sgd.h"

#include "core/ops/optimizer_update.h"

namespace alloy::optim {

Sgd::Sgd(std::vector<nn::Parameter*> params, OptimizerConfig config)
    : Optimizer(std::move(params), std::move(config)), momentum_(params_.size()) {
  check_common("sgd");
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

void Sgd::step(float grad_scale, const Tensor& found_inf) {
  SgdHyper hyper;
  hyper.lr = config_.lr;
  hyper.momentum = config_.momentum;
  hyper.dampening = 0.0f;
  hyper.weight_decay = config_.weight_decay;
  hyper.nesterov = config_.nesterov;
  hyper.grad_scale = grad_scale;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& param = *params_[i];
    if (!param.grad.defined()) continue;  // took no part in the loss
    Tensor no_buffer;
    Tensor& buffer = hyper.momentum > 0.0f ? momentum_buffer(i) : no_buffer;
    // A zero buffer updated as usual equals PyTorch's first-step buffer = grad when dampening
    // is 0, and stays right when found_inf skips that step without the host knowing.
    sgd_update(param.value, param.grad, buffer, hyper, /*first_step=*/false, found_inf);
  }
  ++steps_;
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
