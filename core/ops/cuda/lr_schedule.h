// CUDA twin of core/ops/lr_schedule.h's kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/lr_schedule.h"

namespace alloy::cuda {

// *lr = scheduled_lr(schedule, step[0]), read and written on the device: one thread.
void apply_lr_schedule(const LrSchedule& schedule, const std::int32_t* step, float* lr,
                       cudaStream_t stream);

}  // namespace alloy::cuda
