// The fused unscale pass of the amp step: every gradient is multiplied by 1/scale into its
// output (fp32 master gradients, or in place) while the pass records whether any element was
// inf or NaN. The scale is read from device memory and the verdict written there, so the
// host never has to wait for it.
#pragma once

#include <cstdint>
#include <vector>

#include "amp/ops/update_scale.h"
#include "core/tensor.h"

namespace alloy::amp {

// grads[i] (any float dtype) -> outputs[i] (same shape, any float dtype; may be grads[i]).
// scale: f32 [1]. found_inf: f32 [1], set to 1 if any element is not finite, else 0.
// first_overflow: i32 [1], the smallest i whose grads[i] holds a non-finite value, else -1.
void unscale_and_check(const std::vector<const Tensor*>& grads, const std::vector<Tensor*>& outputs,
                       const Tensor& scale, Tensor& found_inf, Tensor& first_overflow);

// The dynamic scaler's part of a step, fused: unscale_and_check with state's scale, found_inf
// and first_overflow, then update_scale(state, config) on that verdict. On the GPU both are one
// launch (the pass's last block runs the state machine), where they were a reset, the pass, a
// finish and the update. Updating the scale before the optimizer step instead of after it
// changes nothing: the step reads found_inf, never the scale.
void unscale_check_and_update(const std::vector<const Tensor*>& grads,
                              const std::vector<Tensor*>& outputs, ScalerState& state,
                              const LossScaleConfig& config);

namespace cpu {
// One tensor's share of the pass; returns whether it saw a non-finite value.
bool unscale_and_check(const void* grad, DType grad_dtype, void* output, DType output_dtype,
                       std::int64_t count, float inverse_scale);
}  // namespace cpu

}  // namespace alloy::amp
