// The two ends of a layout region. A model's input and output are NCHW; between an EnterLayout
// and its LeaveLayout the activations are in the layout set by Module::set_layout (NHWC: what
// cuDNN's half-precision tensor-core convolutions read natively). Under NCHW both are
// identities; under NHWC they permute, or only reshape where the bytes agree (one channel, or
// a 1x1 image), as at resnet18's single-channel input and after its global average pool.
#pragma once

#include "core/nn/module.h"

namespace alloy::nn {

// [N, C, H, W] in, the region's layout out.
class EnterLayout : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "EnterLayout"; }
  bool only_reorders() const override { return true; }

 protected:
  bool enters_layout() const override { return true; }
};

// The region's layout in, [N, C, H, W] out.
class LeaveLayout : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "LeaveLayout"; }
};

}  // namespace alloy::nn
