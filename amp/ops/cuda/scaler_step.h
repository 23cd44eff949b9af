// The dynamic loss scale's device state and configuration as one kernel argument, for
// update_scale's kernel and the unscale pass's last block (scaler_step.cuh runs it).
#pragma once

#include <cstdint>

#include "amp/opt_level.h"

namespace alloy::amp::cuda {

// The scaler's device state and its configuration, as one kernel argument.
struct ScalerStep {
  float* scale;
  std::int32_t* clean_steps;
  std::int32_t* skipped_steps;
  std::int32_t* at_min_streak;
  std::int32_t* overflow_streak;
  std::int32_t* unreported_overflow;
  float min_scale, max_scale, growth_factor, backoff_factor;
  std::int64_t window;
};

inline ScalerStep scaler_step_of(float* scale, std::int32_t* clean_steps,
                                 std::int32_t* skipped_steps, std::int32_t* at_min_streak,
                                 std::int32_t* overflow_streak, std::int32_t* unreported_overflow,
                                 const LossScaleConfig& config) {
  return {scale,
          clean_steps,
          skipped_steps,
          at_min_streak,
          overflow_streak,
          unreported_overflow,
          config.min_scale,
          config.max_scale,
          config.growth_factor,
          config.backoff_factor,
          config.window};
}

}  // namespace alloy::amp::cuda
