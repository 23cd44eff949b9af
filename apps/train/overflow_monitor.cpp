#include "apps/train/overflow_monitor.h"

#include <algorithm>

namespace alloy::app {

OverflowMonitor::OverflowMonitor(amp::LossScaler& scaler, std::function<std::string(int)> name_of,
                                 std::int64_t interval,
                                 std::optional<std::int64_t> max_consecutive_skips)
    : scaler_(scaler),
      name_of_(std::move(name_of)),
      interval_(interval),
      max_consecutive_skips_(max_consecutive_skips) {
  ALLOY_CHECK(interval > 0, "OverflowMonitor: interval must be positive, got ", interval);
  ALLOY_CHECK(!max_consecutive_skips || *max_consecutive_skips >= 0,
              "OverflowMonitor: max_consecutive_skips must not be negative, got ",
              *max_consecutive_skips);
  if (max_consecutive_skips && *max_consecutive_skips > 0) {
    interval_ = std::min(interval_, *max_consecutive_skips);
  }
}

std::optional<std::string> OverflowMonitor::after_step(std::int64_t step) {
  if (!scaler_.dynamic()) return std::nullopt;  // a static scale never skips
  ++steps_since_poll_;
  std::optional<std::string> warning;
  const bool due = steps_since_poll_ >= interval_;
  const bool arrived = scaler_.poll_queued() && (read_when_due_ ? due : scaler_.poll_arrived());
  if (arrived) warning = report(scaler_.take_poll(), queued_steps_, queued_step_);
  if (due && !scaler_.poll_queued()) {
    queue_poll(step);
    // On the CPU it is there at once: read at its own step, as a blocking read would be. One
    // read a step: one that just arrived leaves this one to the next step.
    if (!read_when_due_ && !arrived && scaler_.poll_arrived()) {
      warning = report(scaler_.take_poll(), queued_steps_, queued_step_);
    }
  }
  return warning;
}

std::optional<std::string> OverflowMonitor::poll(std::int64_t step) {
  if (!scaler_.dynamic()) return std::nullopt;
  std::int64_t steps = steps_since_poll_;
  std::int32_t first = -1;
  if (scaler_.poll_queued()) {
    // Waits if it has not arrived: the epoch's end is outside the step loop.
    const amp::LossScaler::Poll earlier = scaler_.take_poll();
    // The rule at the step it was queued, as if read there (where it found new skips).
    if (earlier.state.skipped_steps > std::max(reported_skips_, 0)) check(earlier, queued_step_);
    steps += queued_steps_;
    first = earlier.unreported_overflow;  // taken by it: the later read has another or none
  }
  queue_poll(step);
  amp::LossScaler::Poll now = scaler_.take_poll();
  if (first >= 0) now.unreported_overflow = first;
  return report(now, steps, step);
}

void OverflowMonitor::queue_poll(std::int64_t step) {
  scaler_.queue_poll();
  queued_steps_ = steps_since_poll_;
  queued_step_ = step;
  steps_since_poll_ = 0;
}

void OverflowMonitor::check(const amp::LossScaler::Poll& read, std::int64_t step) const {
  const amp::ScalerSnapshot& state = read.state;
  const std::int32_t first = read.unreported_overflow;
  const std::string where = first >= 0 ? " (first in " + name_of_(first) + ")" : "";
  const std::string advice = "; lower {lr}, or check the data and the model";
  if (!max_consecutive_skips_ && state.at_min_streak >= kMaxStepsAtMinimum) {
    throw TrainingDiverged(
        detail::concat("training diverged: the last ", state.at_min_streak,
                       " steps all overflowed with the loss scale at its minimum ", state.scale,
                       where, advice),
        state.overflow_streak, step);
  }
  if (max_consecutive_skips_ && *max_consecutive_skips_ > 0 &&
      state.overflow_streak >= *max_consecutive_skips_) {
    throw TrainingDiverged(
        detail::concat("training diverged: the last ", state.overflow_streak,
                       " steps all overflowed ({max_consecutive_skips} ", *max_consecutive_skips_,
                       "; loss scale now ", state.scale, ")", where, advice),
        state.overflow_streak, step);
  }
}

std::optional<std::string> OverflowMonitor::report(const amp::LossScaler::Poll& read,
                                                   std::int64_t steps, std::int64_t step) {
  const amp::ScalerSnapshot& state = read.state;
  const std::int32_t previous = reported_skips_ < 0 ? 0 : reported_skips_;
  reported_skips_ = state.skipped_steps;
  const std::int32_t new_skips = state.skipped_steps - previous;
  if (new_skips <= 0) return std::nullopt;
  check(read, step);
  const std::int32_t first = read.unreported_overflow;
  const std::string where = first >= 0 ? " (first in " + name_of_(first) + ")" : "";
  return detail::concat("gradient overflow: ", new_skips, " of the last ", steps, " steps skipped",
                        where, "; loss scale now ", state.scale);
}

}  // namespace alloy::app
