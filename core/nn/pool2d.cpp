#include "core/nn/pool2d.h"

namespace alloy::nn {

namespace {

Pool2dParams square_pool(const char* layer, int kernel, int stride, int padding) {
  ALLOY_CHECK(kernel > 0 && stride >= 0 && padding >= 0, layer, ": kernel ", kernel, ", stride ",
              stride, ", padding ", padding, " (kernel must be positive)");
  // PyTorch's rule, so windows never start inside the padding only.
  ALLOY_CHECK(2 * padding <= kernel, layer, ": padding ", padding,
              " must be at most half the kernel ", kernel);
  Pool2dParams params;
  params.kernel_h = params.kernel_w = kernel;
  params.stride_h = params.stride_w = stride == 0 ? kernel : stride;
  params.pad_h = params.pad_w = padding;
  return params;
}

std::string pool_options(const Pool2dParams& params) {
  return detail::concat("kernel=", params.kernel_h, ", stride=", params.stride_h,
                        ", padding=", params.pad_h);
}

}  // namespace

AvgPool2d::AvgPool2d(int kernel, int stride, int padding)
    : params_(square_pool("AvgPool2d", kernel, stride, padding)) {}

std::string AvgPool2d::options() const {
  return pool_options(params_);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  Tensor y = avg_pool2d_forward(x, params_, layout());
  x_shape_ = keeps_activations() ? x.shape() : Shape();
  return y;
}

Tensor AvgPool2d::backward(const Tensor& dy) {
  ALLOY_CHECK(!x_shape_.empty(), "AvgPool2d: backward without a training forward");
  Tensor dx = avg_pool2d_backward(dy, x_shape_, params_, layout());
  x_shape_.clear();
  return dx;
}

MaxPool2d::MaxPool2d(int kernel, int stride, int padding)
    : params_(square_pool("MaxPool2d", kernel, stride, padding)) {}

std::string MaxPool2d::options() const {
  return pool_options(params_);
}

Tensor MaxPool2d::forward(const Tensor& x) {
  MaxPoolResult result = max_pool2d_forward(x, params_, layout());
  if (keeps_activations()) {
    x_shape_ = x.shape();
    argmax_ = std::move(result.argmax);
  } else {
    x_shape_.clear();
    argmax_ = Tensor();
  }
  return std::move(result.y);
}

Tensor MaxPool2d::backward(const Tensor& dy) {
  ALLOY_CHECK(argmax_.defined(), "MaxPool2d: backward without a training forward");
  Tensor dx = max_pool2d_backward(dy, argmax_, x_shape_, layout());
  argmax_ = Tensor();
  x_shape_.clear();
  return dx;
}

}  // namespace alloy::nn
