// Watches the loss scaler for the user: every few steps it reads the scaler's counters (one
// download; the only host read of amp state, for logging) and turns skipped steps into one warning
// that names the gradient that overflowed first, instead of a line per step. Steps that keep
// overflowing mean training has diverged: that is an error (TrainingDiverged). By default the
// rule is today's: a scale stuck at its minimum while steps keep overflowing. With
// --max-consecutive-skips N it is the user's: N overflowing steps in a row at any scale (0: never).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "amp/loss_scaler.h"
#include "core/error.h"

namespace alloy::app {

// Thrown when the overflow rule stops training; a distinct type so that `alloy train` can add
// which checkpoint to resume from. `streak` is the number of overflowing steps in a row.
class TrainingDiverged : public Error {
 public:
  TrainingDiverged(const std::string& message, std::int64_t streak)
      : Error(message), streak_(streak) {}
  std::int64_t streak() const { return streak_; }

 private:
  std::int64_t streak_;
};

class OverflowMonitor {
 public:
  static constexpr std::int64_t kDefaultInterval = 25;
  // Overflowing steps in a row at the minimum scale before training is stopped (the rule
  // without --max-consecutive-skips).
  static constexpr std::int32_t kMaxStepsAtMinimum = 20;

  // name_of maps a gradient index (the scaler's first_overflow) to its parameter's name.
  // max_consecutive_skips: nothing for the default rule, 0 for none, N for N skips in a row at
  // any scale. The scaler is then polled every min(interval, N) steps (the step itself reads
  // nothing back), so training stops at the first poll that finds N or more overflows in a
  // row: at most N - 1 steps after the N-th.
  OverflowMonitor(amp::LossScaler& scaler, std::function<std::string(int)> name_of,
                  std::int64_t interval = kDefaultInterval,
                  std::optional<std::int64_t> max_consecutive_skips = std::nullopt);

  // After each step (1-based global step count): a warning to show, if one is due. Throws
  // TrainingDiverged when the rule says training has diverged.
  std::optional<std::string> after_step(std::int64_t step);
  // Reads the scaler now (end of an epoch) whatever the interval.
  std::optional<std::string> poll();

 private:
  amp::LossScaler& scaler_;
  std::function<std::string(int)> name_of_;
  std::int64_t interval_;
  std::optional<std::int64_t> max_consecutive_skips_;
  std::int32_t reported_skips_ = -1;  // skipped_steps at the last poll; -1 before the first
  std::int64_t steps_since_poll_ = 0;
};

}  // namespace alloy::app
