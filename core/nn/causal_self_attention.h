// GPT-2's CausalSelfAttention on [B, T, C] activations: c_attn (linear C -> 3C) makes q | k | v,
// causal attention over `heads` heads (core/ops/attention.h: online softmax, no T x T matrix),
// c_proj (linear C -> C), then dropout (resid_dropout). The attention itself computes in the
// dtype of c_attn's output (O1's half compute for the projections, fp32 statistics inside);
// its probabilities get no dropout (see core/ops/attention.h).
#pragma once

#include "core/nn/dropout.h"
#include "core/nn/linear.h"
#include "core/nn/module.h"

namespace alloy::nn {

class CausalSelfAttention : public Module {
 public:
  // UsageError unless channels is a positive multiple of heads. Projections start at zero.
  CausalSelfAttention(int channels, int heads, bool bias, float dropout, Generator& generator);

  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "CausalSelfAttention"; }
  std::string options() const override;

  Linear& c_attn() { return c_attn_; }
  Linear& c_proj() { return c_proj_; }

 private:
  int channels_, heads_;
  Linear& c_attn_;
  Linear& c_proj_;
  Dropout& dropout_;
  // Until backward: q | k | v, the attention's output and its row statistics.
  Tensor qkv_, y_, lse_;
};

}  // namespace alloy::nn
