#include "amp/loss_scaler.h"

namespace alloy::amp {

namespace {
Tensor scalar(DType dtype, Device device, float value) {
  Tensor host = Tensor::from_floats({1}, {value}, dtype, MemoryCategory::optimizer_state);
  if (device.is_cpu()) return host;
  Tensor placed = Tensor::empty({1}, dtype, device, MemoryCategory::optimizer_state);
  placed.copy_from(host);
  return placed;
}

float read(const Tensor& tensor) {
  return tensor.to_floats()[0];  // one download, on every device
}
}  // namespace

LossScaler::LossScaler(const LossScaleConfig& config, Device device) : config_(config) {
  const float initial = config.dynamic ? config.init_scale : config.static_scale;
  state_.scale = scalar(DType::f32, device, initial);
  state_.clean_steps = scalar(DType::i32, device, 0);
  state_.skipped_steps = scalar(DType::i32, device, 0);
  state_.at_min_streak = scalar(DType::i32, device, 0);
  state_.overflow_streak = scalar(DType::i32, device, 0);
  state_.found_inf = scalar(DType::f32, device, 0);
  state_.first_overflow = scalar(DType::i32, device, -1);
  state_.unreported_overflow = scalar(DType::i32, device, -1);
}

std::int32_t LossScaler::take_unreported_overflow() {
  const auto index = static_cast<std::int32_t>(read(state_.unreported_overflow));
  if (index >= 0) state_.unreported_overflow.copy_from(scalar(DType::i32, Device::cpu(), -1));
  return index;
}

void LossScaler::update() {
  if (config_.dynamic) update_scale(state_, config_);
}

ScalerSnapshot LossScaler::snapshot() const {
  ScalerSnapshot snapshot;
  snapshot.scale = read(state_.scale);
  snapshot.clean_steps = static_cast<std::int32_t>(read(state_.clean_steps));
  snapshot.skipped_steps = static_cast<std::int32_t>(read(state_.skipped_steps));
  snapshot.at_min_streak = static_cast<std::int32_t>(read(state_.at_min_streak));
  snapshot.overflow_streak = static_cast<std::int32_t>(read(state_.overflow_streak));
  snapshot.first_overflow = static_cast<std::int32_t>(read(state_.first_overflow));
  return snapshot;
}

void LossScaler::restore(const ScalerSnapshot& snapshot) {
  const auto set = [](Tensor& target, float value) {
    target.copy_from(scalar(target.dtype(), Device::cpu(), value));
  };
  set(state_.scale, snapshot.scale);
  set(state_.clean_steps, static_cast<float>(snapshot.clean_steps));
  set(state_.skipped_steps, static_cast<float>(snapshot.skipped_steps));
  set(state_.at_min_streak, static_cast<float>(snapshot.at_min_streak));
  set(state_.overflow_streak, static_cast<float>(snapshot.overflow_streak));
  set(state_.first_overflow, static_cast<float>(snapshot.first_overflow));
}

}  // namespace alloy::amp
