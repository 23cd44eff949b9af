#include "core/nn/layout_boundary.h"

#include "core/ops/permute.h"

namespace alloy::nn {

namespace {

// NCHW -> NHWC: a view when the bytes are already in that order.
Tensor channels_last(const Tensor& x) {
  const Nchw s = nchw_sizes(x.shape(), Layout::nchw, "EnterLayout");
  if (s.c == 1 || s.h * s.w == 1) return x.reshape(shape_in(Layout::nhwc, s.n, s.c, s.h, s.w));
  return to_channels_last(x);
}

// NHWC -> NCHW, likewise.
Tensor channels_first(const Tensor& x) {
  const Nchw s = nchw_sizes(x.shape(), Layout::nhwc, "LeaveLayout");
  if (s.c == 1 || s.h * s.w == 1) return x.reshape(shape_in(Layout::nchw, s.n, s.c, s.h, s.w));
  return to_channels_first(x);
}

}  // namespace

Tensor EnterLayout::forward(const Tensor& x) {
  return layout() == Layout::nhwc ? channels_last(x) : x;
}

Tensor EnterLayout::backward(const Tensor& dy) {
  if (!dy.defined() || layout() == Layout::nchw) return dy;  // undefined: not needed
  return channels_first(dy);
}

Tensor LeaveLayout::forward(const Tensor& x) {
  return layout() == Layout::nhwc ? channels_first(x) : x;
}

Tensor LeaveLayout::backward(const Tensor& dy) {
  return layout() == Layout::nhwc ? channels_last(dy) : dy;
}

}  // namespace alloy::nn
