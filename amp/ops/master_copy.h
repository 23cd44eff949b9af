// O2's last act of a step: every fp32 master is rounded into its half model parameter in one
// pass (one kernel launch on the GPU for all tensors).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace alloy::amp {

// masters[i] (f32) -> model[i] (f16, bf16 or f32), same shapes.
void copy_masters_to_model(const std::vector<const Tensor*>& masters,
                           const std::vector<Tensor*>& model);

}  // namespace alloy::amp
