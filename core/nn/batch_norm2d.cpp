#include "core/nn/batch_norm2d.h"

#include "core/nn/cast_policy.h"
#include "core/nn/input_dtype.h"
#include "core/nn/new_parameter.h"

namespace alloy::nn {

BatchNorm2d::BatchNorm2d(int channels, float momentum, float eps, bool fuse_relu)
    : weight_(register_parameter("weight", new_parameter("BatchNorm2d", {channels}, 1.0f),
                                 /*is_norm=*/true)),
      bias_(register_parameter("bias", new_parameter("BatchNorm2d", {channels}, 0.0f),
                               /*is_norm=*/true)),
      running_mean_(
          register_buffer("running_mean", new_parameter("BatchNorm2d", {channels}, 0.0f))),
      running_var_(register_buffer("running_var", new_parameter("BatchNorm2d", {channels}, 1.0f))) {
  ALLOY_CHECK(momentum >= 0.0f && momentum <= 1.0f && eps > 0.0f,
              "BatchNorm2d: momentum must be in [0, 1] and eps positive, got momentum ", momentum,
              ", eps ", eps);
  params_.momentum = momentum;
  params_.eps = eps;
  params_.relu = fuse_relu;
}

std::string BatchNorm2d::options() const {
  return detail::concat("momentum=", params_.momentum, ", eps=", params_.eps,
                        params_.relu ? ", relu" : "");
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  // fp32 parameters take an input of any dtype and keep it (half in, half out, with fp32
  // statistics: O1 after a half convolution, O2's keep_batchnorm_fp32); half parameters (O3)
  // take an input of their own dtype.
  Tensor input =
      in_dtype(x, compute_dtype(OpClass::fp32_statistics, x.dtype(), weight_.value.dtype()));
  input_dtype_ = x.dtype();
  BatchNormParams params = params_;
  params.layout = layout();
  if (!training()) {
    x_ = Tensor();
    y_ = Tensor();
    saved_ = {};
    return batch_norm2d_eval_forward(input, weight_.value, bias_.value, running_mean_.value,
                                     running_var_.value, params);
  }
  params.update_running_statistics = forward_mode().update_running_statistics;
  BatchNormTrainResult result = batch_norm2d_train_forward(
      input, weight_.value, bias_.value, running_mean_.value, running_var_.value, params);
  if (keeps_activations()) {
    x_ = std::move(input);
    y_ = params_.relu ? result.y : Tensor();
    saved_ = std::move(result.saved);
  } else {
    x_ = Tensor();
    y_ = Tensor();
    saved_ = {};
  }
  return std::move(result.y);
}

Tensor BatchNorm2d::backward(const Tensor& dy) {
  const Tensor relu_output = y_;  // undefined without fuse_relu: no mask
  return backward_masked(dy, relu_output);
}

Tensor BatchNorm2d::backward_through_relu(const Tensor& dy, const Tensor& relu_output) {
  ALLOY_CHECK(!params_.relu, "BatchNorm2d (", weight_.name,
              "): backward_through_relu on a batch norm with fuse_relu, which masks with its own "
              "output; call backward");
  ALLOY_CHECK(relu_output.defined(), "BatchNorm2d (", weight_.name,
              "): backward_through_relu needs the ReLU's output");
  return backward_masked(dy, relu_output);
}

Tensor BatchNorm2d::backward_masked(const Tensor& dy, const Tensor& relu_output) {
  ALLOY_CHECK(x_.defined(), "BatchNorm2d (", weight_.name,
              "): backward without a training forward");
  // dy is cast before the mask where the unfused path masks and then casts: both give the same
  // values, as the cast of 0 is 0.
  Tensor dx = batch_norm2d_backward(x_, weight_.value, in_dtype(dy, x_.dtype()), saved_,
                                    grad_of(weight_), grad_of(bias_), relu_output);
  x_ = Tensor();
  y_ = Tensor();
  saved_ = {};
  notify_grads_ready();
  return in_dtype(dx, input_dtype_);
}

}  // namespace alloy::nn
