// Every fp32 master rounded into its half model parameter in one pass (one kernel launch on the
// GPU for all tensors): after the masters were overwritten (a resume). A training step needs
// no such pass: the optimizer's update writes the model copy (Optimizer::write_copies_to),
// with the same rounding.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace alloy::amp {

// masters[i] (f32) -> model[i] (f16, bf16 or f32), same shapes.
void copy_masters_to_model(const std::vector<const Tensor*>& masters,
                           const std::vector<Tensor*>& model);

}  // namespace alloy::amp
