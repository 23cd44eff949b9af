// Evaluation with the weight averages of --ema-decay (amp/mixed_precision.h) in place of the
// trained weights, for both trainers.
#pragma once

#include <functional>

#include "amp/mixed_precision.h"
#include "core/nn/module.h"

namespace alloy::app {

// Runs `work` with `model`'s parameters and buffers holding `precision`'s averages (rounded once
// into the model's dtype, as the masters are at O2), then puts the trained values back, also
// when `work` throws. Copies in place, never new storage: a captured training step keeps the
// weights' addresses.
void with_weight_averages(nn::Module& model, amp::MixedPrecision& precision,
                          const std::function<void()>& work);

}  // namespace alloy::app
