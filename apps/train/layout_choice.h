// --layout: the memory order a model's layout region runs in (core/nn/layout_boundary.h).
#pragma once

#include <string>

#include "amp/opt_level.h"
#include "core/layout.h"
#include "core/nn/module.h"

namespace alloy::app {

// Throws UsageError unless `flag` is auto, nchw or nhwc.
void check_layout_choice(const std::string& flag);

// auto: NHWC where it pays, NCHW elsewhere. It pays on a CUDA device when the convolutions
// compute in half precision (O1's cast policy, O2's and O3's half model), in a model with a
// layout region (resnet18): cuDNN's tensor-core kernels read NHWC, and given NCHW transpose
// every input and output. fp32 convolutions (O0) and the CPU stay NCHW. nhwc on a model
// without a layout region is a UsageError naming the model.
Layout choose_layout(const std::string& flag, const std::string& model_name,
                     const nn::Module& model, bool cuda, const amp::AmpProperties& precision);

}  // namespace alloy::app
