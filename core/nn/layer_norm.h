// Layer normalisation over the last dimension, PyTorch's nn.LayerNorm(features, eps,
// elementwise_affine=True): each row of `features` values is normalised with its own mean and
// biased variance, then scaled by weight and shifted by bias. No running statistics: training
// and evaluation compute the same output; only training keeps what backward needs.
#pragma once

#include "core/nn/module.h"
#include "core/ops/layer_norm.h"

namespace alloy::nn {

class LayerNorm : public Module {
 public:
  // weight 1, bias 0 (both is_norm, so keep_batchnorm_fp32 keeps them fp32 as batch norm's).
  explicit LayerNorm(int features, float eps = 1e-5f, bool bias = true);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string options() const override;

  Parameter& weight() { return weight_; }
  // Throws for a layer built without bias.
  Parameter& bias();
  bool has_bias() const { return bias_ != nullptr; }

 private:
  const Tensor& shift();
  Tensor& shift_grad();

  Parameter& weight_;
  Parameter* bias_ = nullptr;
  int features_;
  float eps_;
  // Until backward: the input as normalised and its rows' statistics.
  Tensor x_;
  LayerNormSaved saved_;
  DType input_dtype_ = DType::f32;
  // Without bias: the zero shift the op takes, and where its unused gradient goes.
  Tensor zero_bias_;
  Tensor unused_dbias_;
};

}  // namespace alloy::nn
