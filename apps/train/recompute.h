// Activation recomputation (--recompute): which of a model's modules re-run their forward in
// backward instead of keeping their activations (nn::Sequential, core/nn/sequential.h).
#pragma once

#include <string>
#include <vector>

#include "core/nn/module.h"

namespace alloy::app {

// The choices of --recompute: "none", or "blocks" (every block, nn::Module::is_block: ResNet's
// residual blocks).
const std::vector<std::string>& recompute_choices();

// A UsageError naming --recompute unless `recompute` is one of recompute_choices().
void check_recompute_choice(const std::string& recompute);

// Applies `recompute` (one of recompute_choices) to `model`, built as `model_name`. A
// UsageError when blocks are asked of a model that has none, which would recompute nothing.
void apply_recompute(nn::Module& model, const std::string& model_name,
                     const std::string& recompute);

}  // namespace alloy::app
