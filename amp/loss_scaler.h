// The loss scaler: dynamic or static, its state in device memory (see amp/ops/update_scale.h).
// The host reads the scale and the skip count only to log them, never to decide a step.
#pragma once

#include <cstdint>

#include "amp/ops/update_scale.h"
#include "amp/opt_level.h"
#include "core/device.h"

namespace alloy::amp {

// A plain-number copy of the scaler's state, for logs and checkpoints.
struct ScalerSnapshot {
  float scale = 1.0f;
  std::int32_t clean_steps = 0;
  std::int32_t skipped_steps = 0;
  std::int32_t at_min_streak = 0;
  std::int32_t first_overflow = -1;  // of the last step
  std::int32_t overflow_streak = 0;  // consecutive overflowing steps at any scale
};

class LossScaler {
 public:
  LossScaler(const LossScaleConfig& config, Device device);

  const LossScaleConfig& config() const { return config_; }
  bool dynamic() const { return config_.dynamic; }

  // f32 [1]: the factor the loss gradient is multiplied by.
  const Tensor& scale() const { return state_.scale; }
  ScalerState& state() { return state_; }

  // After the optimizer step: the dynamic state machine (a no-op for a static scale).
  void update();

  // Host copies; each is a device-to-host read on a GPU, so call them only to log.
  ScalerSnapshot snapshot() const;
  void restore(const ScalerSnapshot& snapshot);
  // The index of the gradient that overflowed first in the earliest skipped step since the
  // last call, or -1; resets it. For the rate-limited overflow warning.
  std::int32_t take_unreported_overflow();

 private:
  LossScaleConfig config_;
  ScalerState state_;
};

}  // namespace alloy::amp
