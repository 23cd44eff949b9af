// What ResNet's basic and bottleneck blocks share: the shortcut (the identity, or a strided 1x1
// convolution and batch norm when the shape changes) and the closing relu(branch + shortcut(x)).
// The ReLU is fused into the sum (add_relu_forward) and its mask into the backward ops after it,
// with the same bits as the separate ops.
#pragma once

#include "core/nn/batch_norm2d.h"
#include "core/nn/conv2d.h"
#include "core/nn/module.h"
#include "core/nn/sequential.h"

namespace alloy::nn {

class ResidualBase : public Module {
 public:
  bool is_block() const override { return true; }

 protected:
  // Registers the shortcut (parameter names "shortcut.0.*", "shortcut.1.*") when the shape
  // changes. Called after the branch's modules, so the shortcut's parameters come last.
  void add_shortcut(int in_channels, int out_channels, int stride);
  // relu(branch + shortcut(x)); keeps that output, whose sign is the ReLU's mask, for backward.
  Tensor close_forward(const Tensor& x, const Tensor& branch);
  // The output close_forward kept, released; the error names the block by its type and
  // `first`, its first weight.
  Tensor take_output(const Parameter& first);
  // The shortcut's input gradient from dy and the block's output y (undefined for the identity).
  // Runs before the branch's backward: the shortcut's parameters come last in registration
  // order, so the grad-ready hook sees the block's parameters exactly reversed.
  Tensor shortcut_backward(const Tensor& dy, const Tensor& y);
  // The block's input gradient from the branch's (d_main) and the shortcut's (d_skip), or
  // undefined when the block needs none.
  Tensor close_backward(const Tensor& dy, const Tensor& y, const Tensor& d_main,
                        const Tensor& d_skip);

 private:
  // Null for the identity; the Sequential's backward runs here, so that the shortcut's batch
  // norm can mask its gradient.
  Sequential* shortcut_ = nullptr;
  Conv2d* shortcut_conv_ = nullptr;
  BatchNorm2d* shortcut_bn_ = nullptr;
  Tensor y_;  // until backward: the block's output
  DType input_dtype_ = DType::f32;
};

}  // namespace alloy::nn
