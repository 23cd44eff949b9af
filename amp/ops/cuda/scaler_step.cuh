// The dynamic loss scale's state machine as one device function, shared by update_scale's
// kernel and the unscale pass's last block (which runs it in the same launch as the pass).
// Line for line the CPU twin, amp/ops/cpu/update_scale.cpp.
#pragma once

#include <cuda_runtime.h>

#include "amp/ops/cuda/scaler_step.h"

namespace alloy::amp::cuda {

// One step of the state machine, run by one thread.
__device__ __forceinline__ void run_scaler_step(const ScalerStep& s, bool found_inf,
                                                std::int32_t first_overflow) {
  if (found_inf) {
    if (*s.unreported_overflow < 0) *s.unreported_overflow = first_overflow;
    *s.at_min_streak = *s.scale <= s.min_scale ? *s.at_min_streak + 1 : 0;
    *s.overflow_streak += 1;
    *s.scale = fmaxf(*s.scale * s.backoff_factor, s.min_scale);
    *s.clean_steps = 0;
    *s.skipped_steps += 1;
    return;
  }
  *s.at_min_streak = 0;
  *s.overflow_streak = 0;
  *s.clean_steps += 1;
  if (*s.clean_steps >= s.window) {
    *s.scale = fminf(*s.scale * s.growth_factor, s.max_scale);
    *s.clean_steps = 0;
  }
}

}  // namespace alloy::amp::cuda
