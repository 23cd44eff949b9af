#include "apps/overflow_monitor.h"

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

std::optional<std::string> OverflowMonitor::after_step(std::int64_t /*step*/) {
  if (!scaler_.dynamic()) return std::nullopt;  // a static scale never skips
  if (++steps_since_poll_ < interval_) return std::nullopt;
  return poll();
}

std::optional<std::string> OverflowMonitor::poll() {
  if (!scaler_.dynamic()) return std::nullopt;
  const std::int64_t steps = steps_since_poll_;
  steps_since_poll_ = 0;
  // One download: the state and the first overflow since the last poll.
  const amp::LossScaler::Poll read = scaler_.poll();
  const amp::ScalerSnapshot& state = read.state;
  const std::int32_t previous = reported_skips_ < 0 ? 0 : reported_skips_;
  reported_skips_ = state.skipped_steps;
  const std::int32_t new_skips = state.skipped_steps - previous;
  if (new_skips <= 0) return std::nullopt;

  const std::int32_t first = read.unreported_overflow;
  const std::string where = first >= 0 ? " (first in " + name_of_(first) + ")" : "";
  const std::string advice = "; lower --lr, or check the data and the model";
  if (!max_consecutive_skips_ && state.at_min_streak >= kMaxStepsAtMinimum) {
    throw TrainingDiverged(
        detail::concat("training diverged: the last ", state.at_min_streak,
                       " steps all overflowed with the loss scale at its minimum ", state.scale,
                       where, advice),
        state.overflow_streak);
  }
  if (max_consecutive_skips_ && *max_consecutive_skips_ > 0 &&
      state.overflow_streak >= *max_consecutive_skips_) {
    throw TrainingDiverged(
        detail::concat("training diverged: the last ", state.overflow_streak,
                       " steps all overflowed (--max-consecutive-skips ", *max_consecutive_skips_,
                       "; loss scale now ", state.scale, ")", where, advice),
        state.overflow_streak);
  }
  return detail::concat("gradient overflow: ", new_skips, " of the last ", steps, " steps skipped",
                        where, "; loss scale now ", state.scale);
}

}  // namespace alloy::app
