// Watches the loss scaler for the user: every few steps it reads the scaler's counters (one
// download; the only host read of amp state, for logging) and turns skipped steps into one warning
// that names the gradient that overflowed first, instead of a line per step. Steps that keep
// overflowing mean training has diverged: that is an error (TrainingDiverged). By default the
// rule is today's: a scale stuck at its minimum while steps keep overflowing. With
// --max-consecutive-skips N it is the user's: N overflowing steps in a row at any scale (0: never).
//
// The step loop never waits for a read: a poll queues the download (LossScaler::queue_poll: on
// a GPU into pinned memory, behind the steps queued so far) and the monitor reads it after the
// first step at which it has arrived, asking without waiting. On the CPU that is the poll's own
// step; on a GPU usually a step or two later (the host runs up to two batches ahead of the
// device). The counters read are those of the poll's step, whenever they are read.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "amp/loss_scaler.h"
#include "core/error.h"
#include "core/setting_error.h"

namespace alloy::app {

// Thrown when the overflow rule stops training; a distinct type so that `alloy train` can add
// which checkpoint to resume from. `streak` is the number of overflowing steps in a row up to
// `step`, the global step count of the poll that read it (training may have gone on a few
// steps while the read was in flight): the overflows began after step - streak.
class TrainingDiverged : public SettingFailure {
 public:
  // `message` names settings as {name} (core/setting_error.h).
  TrainingDiverged(const std::string& message, std::int64_t streak, std::int64_t step)
      : SettingFailure(message), streak_(streak), step_(step) {}
  std::int64_t streak() const { return streak_; }
  std::int64_t step() const { return step_; }

 private:
  std::int64_t streak_;
  std::int64_t step_;
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
  // nothing back; a poll that falls due while the previous read has not arrived is queued at
  // the step that reads it), so training stops at the first poll that finds N or more
  // overflows in a row: queued at most N - 1 steps after the N-th, and read when its copy has
  // arrived, a delay of at most the steps until then (none on the CPU).
  OverflowMonitor(amp::LossScaler& scaler, std::function<std::string(int)> name_of,
                  std::int64_t interval = kDefaultInterval,
                  std::optional<std::int64_t> max_consecutive_skips = std::nullopt);

  // After each step (`step`: the 1-based global step count), without a host wait: reads a poll that
  // has arrived, queues one when due, and returns a warning to show if one is due. Throws
  // TrainingDiverged when the rule says training has diverged.
  std::optional<std::string> after_step(std::int64_t step);
  // Data parallelism: every replica must stop at the same step, so a poll is read when the
  // next one falls due (an interval later), not when its copy happens to arrive, waiting for it
  // if it has not (in the trainer's loop, paced by the batch stager, it has: the host runs at
  // most three steps ahead of the device). Warnings and the divergence rule come an interval
  // later than in one process.
  void read_polls_when_due() { read_when_due_ = true; }
  // Reads the scaler now (end of an epoch, outside the step loop; `step`: the global step
  // count) whatever the interval: waits for a poll still in flight, applies the rule to it,
  // then reads the counters as they are and returns one warning for the steps since the last
  // poll read.
  std::optional<std::string> poll(std::int64_t step);

 private:
  void queue_poll(std::int64_t step);
  // The rule on the counters a poll read at global step `step`: throws TrainingDiverged if
  // they say so.
  void check(const amp::LossScaler::Poll& read, std::int64_t step) const;
  // The warning for `steps` steps whose skips `read` (of step `step`) ends, after check().
  std::optional<std::string> report(const amp::LossScaler::Poll& read, std::int64_t steps,
                                    std::int64_t step);

  amp::LossScaler& scaler_;
  std::function<std::string(int)> name_of_;
  std::int64_t interval_;
  std::optional<std::int64_t> max_consecutive_skips_;
  std::int32_t reported_skips_ = -1;   // skipped_steps at the last poll read; -1 before the first
  std::int64_t steps_since_poll_ = 0;  // since the last poll was queued
  std::int64_t queued_steps_ = 0;      // the steps the poll in flight covers
  std::int64_t queued_step_ = 0;       // the global step it was queued after
  bool read_when_due_ = false;
};

}  // namespace alloy::app
