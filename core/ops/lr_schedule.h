// Learning-rate schedules computed where the optimizer's step count lives: before each update
// the optimizer writes lr = scheduled_lr(schedule, updates applied so far) into its lr scalar,
// on the device, so a scheduled step needs no upload and a step replayed from a CUDA graph
// follows the schedule. The count is the optimizer's: steps the loss scaler skipped do not
// advance the schedule (they changed no weight), and a resumed run continues where it stopped.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include <optional>

#include "core/host_device.h"
#include "core/tensor.h"

namespace alloy {

enum class LrDecay : std::int32_t { constant, linear, cosine };

// "constant", "linear", "cosine"; nullopt for anything else.
std::optional<LrDecay> lr_decay_named(const std::string& name);
// lr_decay_named, with a UsageError naming --lr-schedule for an unknown name.
LrDecay parse_lr_decay(const std::string& name);
const char* lr_decay_name(LrDecay decay);

// Linear warm-up from base_lr / warmup_steps to base_lr over the first warmup_steps updates,
// then `decay` from base_lr to min_lr over the updates up to total_steps (and min_lr after).
struct LrSchedule {
  LrDecay decay = LrDecay::constant;
  float base_lr = 0.1f;
  float min_lr = 0.0f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 0;  // the run's optimizer steps: epochs x steps per epoch
};

// The rate of the update that follows `done` applied updates, computed in double and rounded
// once, so the CPU and the GPU agree (up to the last bit of cos on the device):
//   done < warmup:  base * (done + 1) / warmup          (the first update is not wasted on 0)
//   after:          p = (done - warmup) / max(1, total - warmup), clamped to [0, 1]
//                   constant: base; linear: min + (base - min)(1 - p);
//                   cosine: min + (base - min)(1 + cos(pi p)) / 2
ALLOY_HOST_DEVICE inline float scheduled_lr(const LrSchedule& s, std::int64_t done) {
  const double base = s.base_lr;
  if (done < s.warmup_steps) {
    return static_cast<float>(base * static_cast<double>(done + 1) /
                              static_cast<double>(s.warmup_steps));
  }
  if (s.decay == LrDecay::constant) return s.base_lr;
  const std::int64_t span = s.total_steps - s.warmup_steps > 1 ? s.total_steps - s.warmup_steps : 1;
  double p = static_cast<double>(done - s.warmup_steps) / static_cast<double>(span);
  p = p < 0.0 ? 0.0 : (p > 1.0 ? 1.0 : p);
  const double min = s.min_lr;
  const double fraction = s.decay == LrDecay::linear ? 1.0 - p : 0.5 * (1.0 + cos(M_PI * p));
  return static_cast<float>(min + (base - min) * fraction);
}

// Throws Error (naming `who`) unless 0 <= min_lr <= base_lr and the step counts are >= 0.
void check_lr_schedule(const char* who, const LrSchedule& schedule);

// lr[0] = scheduled_lr(schedule, step[0]). lr: f32 [1]; step: the optimizer's i32 [2] count
// (core/ops/optimizer_update.h); both on one device. On a GPU one single-thread launch.
void apply_lr_schedule(const LrSchedule& schedule, const Tensor& step, Tensor& lr);

namespace cpu {
void apply_lr_schedule(const LrSchedule& schedule, const std::int32_t* step, float* lr);
}  // namespace cpu

}  // namespace alloy
