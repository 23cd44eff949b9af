// The loss scaler: dynamic or static, its state in device memory (see amp/ops/update_scale.h).
// The host reads the scale and the skip count only to log them, never to decide a step.
// Every field of the state is a view of one small device buffer, so that the host reads all of
// them in one download (the overflow monitor's poll, apps/train/overflow_monitor.h) and a
// checkpoint restores them in one upload.
#pragma once

#include <cstdint>

#include "amp/ops/update_scale.h"
#include "amp/opt_level.h"
#include "core/device.h"
#include "core/queued_download.h"

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

  // A host copy of the state: one download (and its wait), on every device, so call it only
  // to log or save.
  ScalerSnapshot snapshot() const;
  // Sets the state's fields to the snapshot's: one upload on a GPU.
  void restore(const ScalerSnapshot& snapshot);

  // What the overflow monitor reads at each poll, in one download: the state, and the index of
  // the gradient that overflowed first in the earliest skipped step since the last poll (or
  // -1). The poll takes that index: it is reset to -1 on the device by device work (no upload),
  // for the rate-limited overflow warning to name each overflow once.
  struct Poll {
    ScalerSnapshot state;
    std::int32_t unreported_overflow = -1;
  };
  // A poll without a host wait (core/queued_download.h): queue_poll() queues the download of
  // the state as the work queued so far leaves it, and the reset after it; poll_arrived() says
  // without waiting whether it is there (at once on the CPU); take_poll() returns it, waiting
  // for it only if it is not (a host wait on a GPU, then). One poll at a time.
  void queue_poll();
  bool poll_queued() const { return poll_.queued(); }
  bool poll_arrived() { return poll_.arrived(); }
  Poll take_poll();

 private:
  LossScaleConfig config_;
  Tensor buffer_;  // i32 [kWords]: every field of state_ is a view of it
  ScalerState state_;
  QueuedDownload poll_;  // of buffer_
};

}  // namespace alloy::amp
