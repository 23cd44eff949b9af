#include "amp/mixed_precision.h"

#include <cmath>

#include "amp/ops/master_copy.h"
#include "amp/ops/unscale.h"
#include "core/ops/clip_grad_norm.h"
#include "core/ops/elementwise.h"
#include "core/ops/ema_update.h"

namespace alloy::amp {

MixedPrecision::MixedPrecision(const AmpProperties& properties, nn::Module& model,
                               const optim::OptimizerConfig& optimizer_config)
    : properties_(properties),
      model_params_(model.parameters()),
      buffers_(model.buffers()),
      scaler_(properties.loss_scale,
              model_params_.empty() ? Device::cpu() : model_params_.front()->value.device()) {
  ALLOY_CHECK(!model_params_.empty(), "amp: the model has no parameters");
  const bool half_model = properties.model_dtype != DType::f32;
  const auto stays_fp32 = [&](const nn::Parameter& p) {
    return !half_model || (p.is_norm && properties.keep_batchnorm_fp32);
  };

  // Masters are taken from the fp32 initial weights before the model is rounded to half,
  // so the model equals half(master) from the first step on.
  std::vector<nn::Parameter*> master_of(model_params_.size(), nullptr);
  for (std::size_t i = 0; i < model_params_.size(); ++i) {
    nn::Parameter& p = *model_params_[i];
    ALLOY_CHECK(p.value.dtype() == DType::f32, "amp: parameter ", p.name, " is already ",
                dtype_name(p.value.dtype()), "; amp expects an fp32 model");
    if (stays_fp32(p) || !properties.master_weights) continue;
    auto master = std::make_unique<nn::Parameter>();
    master->name = p.name;
    master->is_norm = p.is_norm;
    master->value = p.value.clone(MemoryCategory::master_parameters);
    master_of[i] = master.get();
    masters_.push_back(std::move(master));
  }
  if (half_model) model.cast_parameters(properties.model_dtype, properties.keep_batchnorm_fp32);
  model.zero_grad();

  for (std::size_t i = 0; i < model_params_.size(); ++i) {
    nn::Parameter& p = *model_params_[i];
    nn::Parameter* master = master_of[i];
    canonical_.push_back(master ? master : &p);
    unscale_inputs_.push_back(&p.grad);
    // With masters the gradients stay scaled: the clip and the update multiply them by the
    // inverse the check pass leaves in grad_unscale_, so no fp32 copy of them exists.
    if (masters_.empty()) unscale_outputs_.push_back(&p.grad);
    if (master) {
      master_grads_.push_back({&master->grad, &p.grad});
      copy_sources_.push_back(&master->value);
      copy_targets_.push_back(&p.value);
    }
  }
  const LossScaleConfig& scale = properties.loss_scale;
  needs_unscale_ = !masters_.empty() || scale.dynamic || scale.static_scale != 1.0f;
  if (!masters_.empty()) {
    grad_unscale_ = Tensor::zeros({1}, DType::f32, model_params_.front()->value.device(),
                                  MemoryCategory::workspace);
  }
  optimizer_ = optim::make_optimizer(optimizer_config, canonical_);
  // The update writes each master's half model weight in its own pass (no separate copy).
  if (!masters_.empty()) {
    std::vector<Tensor*> copies(model_params_.size(), nullptr);
    for (std::size_t i = 0; i < model_params_.size(); ++i) {
      if (master_of[i] != nullptr) copies[i] = &model_params_[i]->value;
    }
    optimizer_->write_copies_to(std::move(copies));
  }
}

void MixedPrecision::step() {
  if (handed_over_step_) {
    handed_over_step_();
    return;
  }
  ScalerState& state = scaler_.state();
  // A master's gradient is its model weight's half gradient, still scaled (backward may have
  // replaced the tensor since the last step).
  for (const auto& [master_grad, model_grad] : master_grads_)
    *master_grad = *model_grad;
  // The scaler's update needs only this step's verdict: it runs in the pass (one launch on the
  // GPU), before the optimizer step, which reads found_inf and not the scale.
  if (grad_unscale_.defined()) {
    // Check only; the inverse of the scale the gradients carry stays on the device.
    if (scaler_.dynamic()) {
      check_invert_and_update(unscale_inputs_, grad_unscale_, state, scaler_.config());
    } else {
      check_and_invert(unscale_inputs_, state.scale, grad_unscale_, state.found_inf,
                       state.first_overflow);
    }
  } else if (scaler_.dynamic()) {
    unscale_check_and_update(unscale_inputs_, unscale_outputs_, state, scaler_.config());
  } else if (needs_unscale_) {
    unscale_and_check(unscale_inputs_, unscale_outputs_, state.scale, state.found_inf,
                      state.first_overflow);
  }
  // The clip acts on the gradients the update reads, unscaled (PyTorch AMP's unscale_, then
  // clip_grad_norm_): at O2 the half gradients times the inverse, each product the f32 value
  // the update will use. Its coefficient stays on the device for the update to apply.
  if (clip_max_norm_ > 0.0f) {
    std::vector<const Tensor*> grads;
    grads.reserve(unscale_inputs_.size());
    for (const Tensor* grad : unscale_inputs_) {
      if (grad->defined()) grads.push_back(grad);  // as the optimizer, skip unused parameters
    }
    alloy::clip_grad_norm(grads, clip_max_norm_, clip_norm_, clip_coefficient_, clip_tally_,
                          grad_unscale_);
  }
  // A static scale never skips (as in Apex): only the dynamic scaler acts on found_inf. The
  // update also rounds each master into its model weight (Optimizer::write_copies_to); a
  // skipped step leaves both as they were, equal. It multiplies each gradient by the inverse,
  // then by the clip's coefficient, the order of an unscaled fp32 copy clipped afterwards, so
  // the bits are those of that copy; undefined factors (no masters, no clipping) are none.
  optimizer_->step(1.0f, scaler_.dynamic() ? state.found_inf : Tensor(), clip_coefficient_,
                   grad_unscale_);
  if (ema_decay_ > 0.0f) {
    std::vector<EmaTensors> pairs;
    pairs.reserve(ema_parameters_.size() + ema_buffers_.size());
    for (std::size_t i = 0; i < ema_parameters_.size(); ++i)
      pairs.push_back({&ema_parameters_[i], &canonical_[i]->value});
    for (std::size_t i = 0; i < ema_buffers_.size(); ++i)
      pairs.push_back({&ema_buffers_[i], &buffers_[i]->value});
    // The optimizer's count already includes this step (when it was applied).
    ema_update(pairs, ema_decay_, scaler_.dynamic() ? state.found_inf : Tensor(),
               ema_warmup_ ? optimizer_->step_count() : Tensor());
  }
  for (const auto& master_grad : master_grads_)
    *master_grad.first = Tensor();
}

void MixedPrecision::hand_over_step(std::unique_ptr<optim::Optimizer> optimizer,
                                    std::function<void()> step) {
  optimizer_ = std::move(optimizer);
  handed_over_step_ = std::move(step);
  for (const auto& master : masters_)
    master->value = Tensor();
  copy_sources_.clear();
  copy_targets_.clear();
}

void MixedPrecision::set_clip_grad_norm(float max_norm) {
  if (!(max_norm >= 0.0f && std::isfinite(max_norm))) {
    usage_fail("amp: clip_grad_norm must be a finite number >= 0, got ", max_norm);
  }
  clip_max_norm_ = max_norm;
  if (max_norm == 0.0f) {
    clip_norm_ = clip_coefficient_ = clip_tally_ = Tensor();
    return;
  }
  if (clip_norm_.defined()) return;  // a new limit for the same scalars
  const Device device = model_params_.front()->value.device();
  clip_norm_ = Tensor::zeros({1}, DType::f32, device, MemoryCategory::workspace);
  clip_coefficient_ = Tensor::zeros({1}, DType::f32, device, MemoryCategory::workspace);
  clip_tally_ = make_clip_tally(device);
}

void MixedPrecision::set_ema_decay(float decay) {
  if (!(decay >= 0.0f && decay < 1.0f)) {
    usage_fail("amp: ema_decay must be in [0, 1), got ", decay);
  }
  const bool was_on = ema_decay_ > 0.0f;
  ema_decay_ = decay;
  if (decay == 0.0f) {
    ema_parameters_.clear();
    ema_buffers_.clear();
    ema_names_.clear();
    return;
  }
  if (was_on) return;  // a new decay for the same averages
  ema_names_.clear();
  for (const nn::Parameter* p : canonical_)
    ema_names_.push_back("ema." + p->name);
  for (const nn::Buffer* b : buffers_)
    ema_names_.push_back("ema." + b->name);
  reset_ema();
}

void MixedPrecision::reset_ema() {
  if (ema_decay_ == 0.0f) return;
  // Allocated once, then overwritten in place: a captured step keeps their addresses.
  const auto reset = [](std::vector<Tensor>& averages, std::size_t i, const Tensor& value) {
    if (averages.size() == i) {
      averages.push_back(Tensor::empty(value.shape(), DType::f32, value.device(),
                                       MemoryCategory::optimizer_state));
    }
    averages[i].copy_from(
        value.dtype() == DType::f32 ? value : cast(value, DType::f32, MemoryCategory::workspace));
  };
  for (std::size_t i = 0; i < canonical_.size(); ++i)
    reset(ema_parameters_, i, canonical_[i]->value);
  for (std::size_t i = 0; i < buffers_.size(); ++i)
    reset(ema_buffers_, i, buffers_[i]->value);
}

std::vector<optim::StateTensor> MixedPrecision::ema_state() {
  std::vector<optim::StateTensor> state;
  for (std::size_t i = 0; i < ema_parameters_.size(); ++i)
    state.push_back({ema_names_[i], &ema_parameters_[i]});
  for (std::size_t i = 0; i < ema_buffers_.size(); ++i)
    state.push_back({ema_names_[ema_parameters_.size() + i], &ema_buffers_[i]});
  return state;
}

std::vector<nn::Parameter*> MixedPrecision::canonical_parameters() {
  return canonical_;
}

void MixedPrecision::sync_model_from_masters() {
  if (!copy_targets_.empty()) copy_masters_to_model(copy_sources_, copy_targets_);
}

const std::string& MixedPrecision::parameter_name(int index) const {
  ALLOY_CHECK(index >= 0 && static_cast<std::size_t>(index) < model_params_.size(),
              "amp: no parameter with index ", index);
  return model_params_[static_cast<std::size_t>(index)]->name;
}

}  // namespace alloy::amp
