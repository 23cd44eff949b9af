// Watches the loss scaler for the user: every few steps it reads the scaler's counters (the
// only host reads of amp state, for logging) and turns skipped steps into one warning that
// names the gradient that overflowed first, instead of a line per step. A scale stuck at its
// minimum while steps keep overflowing means training has diverged: that is an error.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "amp/loss_scaler.h"

namespace alloy::app {

class OverflowMonitor {
 public:
  static constexpr std::int64_t kDefaultInterval = 25;
  // Overflowing steps in a row at the minimum scale before training is stopped.
  static constexpr std::int32_t kMaxStepsAtMinimum = 20;

  // name_of maps a gradient index (the scaler's first_overflow) to its parameter's name.
  OverflowMonitor(amp::LossScaler& scaler, std::function<std::string(int)> name_of,
                  std::int64_t interval = kDefaultInterval);

  // After each step (1-based global step count): a warning to show, if one is due. Throws
  // alloy::Error when the scale sits at its minimum and steps keep overflowing.
  std::optional<std::string> after_step(std::int64_t step);
  // Reads the scaler now (end of an epoch) whatever the interval.
  std::optional<std::string> poll();

 private:
  amp::LossScaler& scaler_;
  std::function<std::string(int)> name_of_;
  std::int64_t interval_;
  std::int32_t reported_skips_ = -1;  // skipped_steps at the last poll; -1 before the first
  std::int64_t steps_since_poll_ = 0;
};

}  // namespace alloy::app
