#include "amp/ops/cuda/scaler_step.cuh"
#include "amp/ops/cuda/update_scale.h"
#include "core/ops/cuda/common.cuh"

namespace alloy::amp::cuda {

namespace {

__global__ void update_scale_kernel(ScalerStep step, const float* found_inf,
                                    const std::int32_t* first_overflow) {
  run_scaler_step(step, *found_inf != 0.0f, *first_overflow);
}

}  // namespace

void update_scale(float* scale, std::int32_t* clean_steps, std::int32_t* skipped_steps,
                  std::int32_t* at_min_streak, std::int32_t* overflow_streak,
                  const float* found_inf, const std::int32_t* first_overflow,
                  std::int32_t* unreported_overflow, const LossScaleConfig& config,
                  cudaStream_t stream) {
  ALLOY_LAUNCH(update_scale_kernel, 1, 1, 0, stream)
  (scaler_step_of(scale, clean_steps, skipped_steps, at_min_streak, overflow_streak,
                  unreported_overflow, config),
   found_inf, first_overflow);
  ALLOY_CUDA_CHECK_LAUNCH("update_scale_kernel");
}

}  // namespace alloy::amp::cuda
