// CUDA twin of amp/ops/update_scale.h: the scaler's state machine in one thread on the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "amp/opt_level.h"

namespace alloy::amp::cuda {

void update_scale(float* scale, std::int32_t* clean_steps, std::int32_t* skipped_steps,
                  std::int32_t* at_min_streak, std::int32_t* overflow_streak,
                  const float* found_inf, const std::int32_t* first_overflow,
                  std::int32_t* unreported_overflow, const LossScaleConfig& config,
                  cudaStream_t stream);

}  // namespace alloy::amp::cuda
