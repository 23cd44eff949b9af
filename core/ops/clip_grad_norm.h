// Gradient-norm clipping as torch.nn.utils.clip_grad_norm_(params, max_norm) computes it, split
// so that no host waits: this op forms, on the device, the total L2 norm over a list of
// gradients and the clip coefficient
//   coefficient = min(max_norm / (norm + 1e-6), 1)
// in f32 [1] tensors; the optimizer's fused update then multiplies each gradient by the
// coefficient as it reads it (grad_factor, core/ops/optimizer_update.h), so no pass rewrites
// the gradients and a step captured in a CUDA graph replays the current coefficient.
//
// With `unscale` (f32 [1] on the device, read there) the norm is that of the gradients times it,
// each product rounded to f32 before it is squared: O2's half gradients, still scaled, give the
// norm of the fp32 unscaled gradients the optimizer's update reads (grad_unscale,
// core/ops/optimizer_update.h) without a copy of them.
//
// The squares are summed in double: on the CPU over fixed chunks of each tensor whose sums are
// combined in index order (the same bits at any thread count), on CUDA per block, the blocks'
// partials combined in a fixed order by the last block to finish (core/ops/cuda/last_block.h).
// Both take sqrt in double and round the norm once to f32; the coefficient is then f32
// arithmetic, as PyTorch's on an f32 norm. A non-finite gradient gives a non-finite norm and,
// as in PyTorch, a coefficient of 0 (norm inf) or NaN (norm NaN): the amp layer skips such a
// step when its dynamic scaler found the overflow; without one the weights take the NaN, as
// with PyTorch's clip_grad_norm_(error_if_nonfinite=False).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_device.h"
#include "core/tensor.h"

namespace alloy {

// PyTorch's guard against division by zero, added to the norm.
constexpr float kClipNormEpsilon = 1e-6f;

// Running figures of the clip over an epoch, kept on the device like the step tally
// (core/ops/step_tally.h): each call adds its norm and counts when the norm is finite; a step
// with a non-finite norm (skipped under a dynamic scaler) adds nothing.
struct ClipTally {
  double norm_sum = 0;             // sum of the finite norms
  std::int32_t finite_steps = 0;   // calls whose norm was finite
  std::int32_t clipped_steps = 0;  // of those, calls whose coefficient was below 1
};
static_assert(sizeof(ClipTally) == 16, "a clip tally is stored as i32[4]");

// The results from the gradients' sum of squares, shared by the CPU and CUDA kernels: sqrt in
// double, one rounding to f32, then the coefficient in f32 (IEEE division on both sides), and
// the tally's update. tally may be null.
ALLOY_HOST_DEVICE inline void finish_clip_grad_norm(double sum_of_squares, float max_norm,
                                                    float* norm, float* coefficient,
                                                    ClipTally* tally) {
  const float n = static_cast<float>(std::sqrt(sum_of_squares));
  const float c = max_norm / (n + kClipNormEpsilon);
  const float clamped = c >= 1.0f ? 1.0f : c;  // torch.clamp(max=1): a NaN stays NaN
  *norm = n;
  *coefficient = clamped;
  if (tally != nullptr && std::isfinite(n)) {
    tally->norm_sum += static_cast<double>(n);
    ++tally->finite_steps;
    if (clamped < 1.0f) ++tally->clipped_steps;
  }
}

// A tally holding `value` on `device`: i32[4] with a ClipTally's bytes, in workspace memory.
// Reset one in place with copy_from (a captured step adds to its address).
Tensor make_clip_tally(Device device, const ClipTally& value = {});
// The tally's value on the host: a device-to-host copy that waits for the device.
ClipTally read_clip_tally(const Tensor& tally);

// grads: defined tensors of any floating dtype and shape on one device. max_norm > 0 and
// finite. norm, coefficient: f32 [1] there, overwritten. tally: a clip tally there, added to,
// or undefined for none. unscale: f32 [1] there, or undefined for none.
void clip_grad_norm(const std::vector<const Tensor*>& grads, float max_norm, Tensor& norm,
                    Tensor& coefficient, Tensor& tally, const Tensor& unscale = {});

// One gradient as raw storage: what the CPU and CUDA kernels take.
struct NormItem {
  const void* data;
  DType dtype;
  std::int64_t count;
};

namespace cpu {
// The squares of every element times unscale (rounded to f32; 1 changes nothing) in double,
// summed over fixed chunks of each item and the chunks' sums in order: the same bits at every
// thread count.
double sum_of_squares(const std::vector<NormItem>& items, float unscale = 1.0f);
// tally may be null.
void clip_grad_norm(const std::vector<NormItem>& items, float max_norm, float* norm,
                    float* coefficient, ClipTally* tally, float unscale = 1.0f);
}  // namespace cpu

}  // namespace alloy
