#include "core/ops/lr_schedule.h"

namespace alloy::cpu {

void apply_lr_schedule(const LrSchedule& schedule, const std::int32_t* step, float* lr) {
  *lr = scheduled_lr(schedule, step[0]);
}

}  // namespace alloy::cpu
