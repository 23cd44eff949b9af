// The dynamic loss scale's state machine, run on the device after every step:
//   found_inf:   scale = max(scale * backoff, min); clean = 0; skipped += 1;
//                at_min_streak += 1 when the scale was already at its minimum, else 0;
//                overflow_streak += 1;
//                unreported_overflow = first_overflow unless it already holds one
//   otherwise:   clean += 1; at_min_streak = 0; overflow_streak = 0; when clean reaches the window,
//                scale = min(scale * growth, max) and clean = 0.
#pragma once

#include "amp/opt_level.h"
#include "core/tensor.h"

namespace alloy::amp {

struct ScalerState {
  Tensor scale;          // f32 [1]
  Tensor clean_steps;    // i32 [1]: consecutive finite steps since the last change
  Tensor skipped_steps;  // i32 [1]: total steps skipped for overflow
  Tensor at_min_streak;  // i32 [1]: consecutive overflows with the scale at its minimum
  // i32 [1]: consecutive overflows at any scale (--max-consecutive-skips reads it at its poll).
  Tensor overflow_streak;
  Tensor found_inf;       // f32 [1]: this step's verdict (written by unscale_and_check)
  Tensor first_overflow;  // i32 [1]: index of the first overflowing gradient, or -1
  // i32 [1]: first_overflow of the earliest skipped step the host has not yet reported, or
  // -1; lets a warning polled every few steps name the gradient that overflowed first.
  Tensor unreported_overflow;
};

void update_scale(ScalerState& state, const LossScaleConfig& config);

namespace cpu {
void update_scale(float* scale, std::int32_t* clean_steps, std::int32_t* skipped_steps,
                  std::int32_t* at_min_streak, std::int32_t* overflow_streak,
                  const float* found_inf, const std::int32_t* first_overflow,
                  std::int32_t* unreported_overflow, const LossScaleConfig& config);
}  // namespace cpu

}  // namespace alloy::amp
