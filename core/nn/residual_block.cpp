#include "core/nn/residual_block.h"

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/ops/elementwise.h"
#include "core/ops/relu.h"

namespace alloy::nn {

ResidualBlock::ResidualBlock(int in_channels, int out_channels, int stride)
    : conv1_(register_module(
          "conv1", std::make_unique<Conv2d>(in_channels, out_channels, 3, stride, 1, false))),
      bn1_(register_module("bn1", std::make_unique<BatchNorm2d>(out_channels))),
      conv2_(register_module("conv2",
                             std::make_unique<Conv2d>(out_channels, out_channels, 3, 1, 1, false))),
      bn2_(register_module("bn2", std::make_unique<BatchNorm2d>(out_channels))) {
  if (stride != 1 || in_channels != out_channels) {
    auto shortcut = std::make_unique<Sequential>();
    shortcut->emplace<Conv2d>(in_channels, out_channels, 1, stride, 0, false);
    shortcut->emplace<BatchNorm2d>(out_channels);
    shortcut_ = &register_module("shortcut", std::move(shortcut));
  }
}

Tensor ResidualBlock::forward(const Tensor& x) {
  Tensor hidden = relu_forward(bn1_.forward(conv1_.forward(x)));
  const Tensor branch = bn2_.forward(conv2_.forward(hidden));
  const Tensor skip = shortcut_ ? shortcut_->forward(x) : x;
  // Mixed dtypes promote: under O1 an fp32 input meets a half branch and adds in fp32.
  const DType sum_dtype = compute_dtype(OpClass::promote, branch.dtype(), skip.dtype());
  Tensor y = relu_forward(add(in_dtype(branch, sum_dtype), in_dtype(skip, sum_dtype)));
  input_dtype_ = x.dtype();
  hidden_ = training() ? std::move(hidden) : Tensor();
  y_ = training() ? y : Tensor();
  return y;
}

Tensor ResidualBlock::backward(const Tensor& dy) {
  ALLOY_CHECK(y_.defined(), "ResidualBlock (", conv1_.weight().name,
              "): backward without a training forward");
  const Tensor d_sum = relu_backward(y_, dy);
  y_ = Tensor();
  // The shortcut first: its parameters come last in registration order, so the grad-ready
  // hook sees this block's parameters exactly reversed.
  Tensor d_skip;
  if (shortcut_) {
    shortcut_->set_needs_input_grad(needs_input_grad());
    d_skip = shortcut_->backward(d_sum);
  } else if (needs_input_grad()) {
    d_skip = in_dtype(d_sum, input_dtype_);
  }
  Tensor d_hidden = conv2_.backward(bn2_.backward(d_sum));
  d_hidden = relu_backward(hidden_, d_hidden);
  hidden_ = Tensor();
  conv1_.set_needs_input_grad(needs_input_grad());
  const Tensor d_main = conv1_.backward(bn1_.backward(d_hidden));
  return needs_input_grad() ? add(d_main, d_skip) : Tensor();
}

}  // namespace alloy::nn
