#include "amp/ops/cuda/update_scale.h"
#include "core/ops/cuda/common.cuh"

namespace alloy::amp::cuda {

namespace {

struct Config {
  float min_scale, max_scale, growth_factor, backoff_factor;
  std::int64_t window;
};

// Line for line the CPU twin (amp/ops/cpu/update_scale.cpp).
__global__ void update_scale_kernel(float* scale, std::int32_t* clean_steps,
                                    std::int32_t* skipped_steps, std::int32_t* at_min_streak,
                                    std::int32_t* overflow_streak, const float* found_inf,
                                    const std::int32_t* first_overflow,
                                    std::int32_t* unreported_overflow, Config config) {
  if (*found_inf != 0.0f) {
    if (*unreported_overflow < 0) *unreported_overflow = *first_overflow;
    *at_min_streak = *scale <= config.min_scale ? *at_min_streak + 1 : 0;
    *overflow_streak += 1;
    *scale = fmaxf(*scale * config.backoff_factor, config.min_scale);
    *clean_steps = 0;
    *skipped_steps += 1;
    return;
  }
  *at_min_streak = 0;
  *overflow_streak = 0;
  *clean_steps += 1;
  if (*clean_steps >= config.window) {
    *scale = fminf(*scale * config.growth_factor, config.max_scale);
    *clean_steps = 0;
  }
}

}  // namespace

void update_scale(float* scale, std::int32_t* clean_steps, std::int32_t* skipped_steps,
                  std::int32_t* at_min_streak, std::int32_t* overflow_streak,
                  const float* found_inf, const std::int32_t* first_overflow,
                  std::int32_t* unreported_overflow, const LossScaleConfig& config,
                  cudaStream_t stream) {
  const Config device_config{config.min_scale, config.max_scale, config.growth_factor,
                             config.backoff_factor, config.window};
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, clean_steps, skipped_steps, at_min_streak,
                                           overflow_streak, found_inf, first_overflow,
                                           unreported_overflow, device_config);
  ALLOY_CUDA_CHECK_LAUNCH("update_scale_kernel");
}

}  // namespace alloy::amp::cuda
