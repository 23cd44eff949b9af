#include "core/ops/lr_schedule.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/lr_schedule.h"
#endif

namespace alloy {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "constant") return LrDecay::constant;
  if (name == "linear") return LrDecay::linear;
  if (name == "cosine") return LrDecay::cosine;
  usage_fail("--lr-schedule must be constant, linear or cosine, got '", name, "'");
}

const char* lr_decay_name(LrDecay decay) {
  switch (decay) {
    case LrDecay::constant:
      return "constant";
    case LrDecay::linear:
      return "linear";
    case LrDecay::cosine:
      return "cosine";
  }
  return "constant";
}

void apply_lr_schedule(const LrSchedule& schedule, const Tensor& step, Tensor& lr) {
  constexpr const char* op = "apply_lr_schedule";
  const Device device = common_device(op, {&step, &lr});
  check_dtype(op, "step", step, DType::i32);
  check_shape(op, "step", step, {2});
  check_dtype(op, "lr", lr, DType::f32);
  check_shape(op, "lr", lr, {1});
  ALLOY_CHECK(schedule.warmup_steps >= 0 && schedule.total_steps >= 0 && schedule.min_lr >= 0.0f &&
                  schedule.min_lr <= schedule.base_lr,
              op, ": a schedule needs warmup_steps >= 0, total_steps >= 0 and 0 <= min_lr <= ",
              "base_lr, got ", schedule.warmup_steps, ", ", schedule.total_steps, ", ",
              schedule.min_lr, ", ", schedule.base_lr);
  ALLOY_RUN_KERNEL(op, device, apply_lr_schedule, schedule, step.data<std::int32_t>(),
                   lr.data<float>());
}

}  // namespace alloy
