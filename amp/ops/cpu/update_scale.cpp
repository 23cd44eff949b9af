#include <algorithm>

#include "amp/ops/update_scale.h"

namespace alloy::amp::cpu {

void update_scale(float* scale, std::int32_t* clean_steps, std::int32_t* skipped_steps,
                  std::int32_t* at_min_streak, std::int32_t* overflow_streak,
                  const float* found_inf, const std::int32_t* first_overflow,
                  std::int32_t* unreported_overflow, const LossScaleConfig& config) {
  if (*found_inf != 0.0f) {
    if (*unreported_overflow < 0) *unreported_overflow = *first_overflow;
    *at_min_streak = *scale <= config.min_scale ? *at_min_streak + 1 : 0;
    *overflow_streak += 1;
    *scale = std::max(*scale * config.backoff_factor, config.min_scale);
    *clean_steps = 0;
    *skipped_steps += 1;
    return;
  }
  *at_min_streak = 0;
  *overflow_streak = 0;
  *clean_steps += 1;
  if (*clean_steps >= config.window) {
    *scale = std::min(*scale * config.growth_factor, config.max_scale);
    *clean_steps = 0;
  }
}

}  // namespace alloy::amp::cpu
