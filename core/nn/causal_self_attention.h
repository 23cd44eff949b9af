// GPT-2's CausalSelfAttention on [B, T, C] activations: c_attn (linear C -> 3C) makes q | k | v,
// causal attention over `heads` heads (core/ops/attention.h: online softmax, no T x T matrix),
// c_proj (linear C -> C), then dropout (resid_dropout). The attention itself computes in the
// dtype of c_attn's output (O1's half compute for the projections, fp32 statistics inside).
// In training, the probabilities get dropout too (attn_dropout), inside the attention kernels,
// its mask keyed like nn::Dropout's (core/nn/dropout.h: the layer's key, the step count, the
// sequence's row in the global batch).
#pragma once

#include "core/nn/dropout.h"
#include "core/nn/linear.h"
#include "core/nn/module.h"
#include "core/ops/attention.h"

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
  float attn_dropout_;
  std::uint64_t attn_key_;
  // Until backward: q | k | v, the attention's output and its row statistics, and the
  // probabilities' dropout when there was one.
  Tensor qkv_, y_, lse_;
  AttentionDropout attention_dropout_;
  bool dropped_ = false;
};

}  // namespace alloy::nn
