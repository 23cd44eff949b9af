// An epoch's running figures, kept on the device that trains: each step adds its mean loss
// times its batch size and its count of correct predictions, so a step never waits for the
// device to report them. The host reads the tally only to show or save it (epoch end, the
// progress bar, a checkpoint). The loss sum is a double updated exactly as host code would
// (sum += double(loss) * rows, step after step), so the figures are bit-identical to a host sum.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

struct StepTally {
  double loss_sum = 0;        // sum over steps of (mean loss x rows)
  std::uint64_t correct = 0;  // rows whose largest logit is at the label
};
static_assert(sizeof(StepTally) == 16, "a tally is stored as i32[4]");

// A tally holding `value` on `device`: i32[4] with a StepTally's bytes, in workspace memory.
Tensor make_step_tally(Device device, const StepTally& value = {});
// tally += {double(loss[0]) * rows, count_correct(logits, labels)}. loss: f32 [1], the mean
// loss of a batch of `rows` = logits.dim(0) examples; logits [rows, C]; labels i32 [rows].
void add_to_step_tally(Tensor& tally, const Tensor& loss, const Tensor& logits,
                       const Tensor& labels);
// The tally's value on the host: a device-to-host copy that waits for the device.
StepTally read_step_tally(const Tensor& tally);

namespace cpu {
void add_to_step_tally(StepTally* tally, const float* loss, const void* logits, DType dtype,
                       const std::int32_t* labels, std::int64_t rows, std::int64_t classes);
}  // namespace cpu

}  // namespace alloy
