#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/lr_schedule.h"

namespace alloy::cuda {

namespace {

__global__ void lr_schedule_kernel(LrSchedule schedule, const std::int32_t* step, float* lr) {
  *lr = scheduled_lr(schedule, step[0]);
}

}  // namespace

void apply_lr_schedule(const LrSchedule& schedule, const std::int32_t* step, float* lr,
                       cudaStream_t stream) {
  ALLOY_LAUNCH(lr_schedule_kernel, 1, 1, 0, stream)(schedule, step, lr);
  ALLOY_CUDA_CHECK_LAUNCH("lr_schedule_kernel");
}

}  // namespace alloy::cuda
