// The fused unscale pass of the amp step: every gradient is multiplied by 1/scale in place (O1)
// while the pass records whether any element was inf or NaN; or, at O2, the same pass without
// the stores: it checks the half gradients and leaves 1/scale on the device for the clip and the
// optimizer to apply as they read them (no fp32 copy of the gradients). The scale is read from
// device memory and the verdict written there, so the host never has to wait for it.
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

// The pass with no outputs: found_inf and first_overflow as unscale_and_check sets them, and
// inverse_scale (f32 [1], on the scale's device) = 1.0f / scale, the inverse that pass multiplies
// by. An update that multiplies each gradient by it as it reads it (grad_unscale,
// core/ops/optimizer_update.h) sees the very f32 products unscale_and_check would have stored.
void check_and_invert(const std::vector<const Tensor*>& grads, const Tensor& scale,
                      Tensor& inverse_scale, Tensor& found_inf, Tensor& first_overflow);

// check_and_invert with state's scale, found_inf and first_overflow, then update_scale in the
// same pass, as unscale_check_and_update; inverse_scale is the inverse of the scale before the
// update, the one the gradients carry.
void check_invert_and_update(const std::vector<const Tensor*>& grads, Tensor& inverse_scale,
                             ScalerState& state, const LossScaleConfig& config);

namespace cpu {
// One tensor's share of the pass; returns whether it saw a non-finite value. output null: the
// check alone.
bool unscale_and_check(const void* grad, DType grad_dtype, void* output, DType output_dtype,
                       std::int64_t count, float inverse_scale);
}  // namespace cpu

}  // namespace alloy::amp
