#include "core/ops/lr_schedule.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/lr_schedule.h"
#endif

namespace alloy {

std::optional<LrDecay> lr_decay_named(const std::string& name) {
  for (const LrDecay decay : {LrDecay::constant, LrDecay::linear, LrDecay::cosine}) {
    if (name == lr_decay_name(decay)) return decay;
  }
  return std::nullopt;
}

LrDecay parse_lr_decay(const std::string& name) {
  if (const std::optional<LrDecay> decay = lr_decay_named(name)) return *decay;
  usage_fail("--lr-schedule must be constant, linear or cosine, got '", name, "'");
}

void check_lr_schedule(const char* who, const LrSchedule& s) {
  ALLOY_CHECK(
      s.min_lr >= 0.0f && s.min_lr <= s.base_lr && s.warmup_steps >= 0 && s.total_steps >= 0, who,
      ": a learning-rate schedule needs 0 <= min_lr <= lr and non-negative step ",
      "counts, got min_lr ", s.min_lr, ", lr ", s.base_lr, ", warmup ", s.warmup_steps, ", total ",
      s.total_steps);
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
  check_lr_schedule(op, schedule);
  ALLOY_RUN_KERNEL(op, device, apply_lr_schedule, schedule, step.data<std::int32_t>(),
                   lr.data<float>());
}

}  // namespace alloy
