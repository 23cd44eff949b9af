#include "core/nn/causal_self_attention.h"

#include "core/ops/attention.h"

namespace alloy::nn {

namespace {

int checked_channels(int channels, int heads) {
  if (heads <= 0 || channels <= 0 || channels % heads != 0) {
    usage_fail("CausalSelfAttention: --n-embd ", channels,
               " must be a positive multiple of --n-head ", heads);
  }
  return channels;
}

// [B, T, C] as [B * T, C] for a linear layer, and back.
Tensor rows(const Tensor& x) {
  return x.reshape({x.dim(0) * x.dim(1), x.dim(2)});
}
Tensor sequences(const Tensor& x, std::int64_t batch) {
  return x.reshape({batch, x.dim(0) / batch, x.dim(1)});
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(int channels, int heads, bool bias, float dropout,
                                         Generator& generator)
    : channels_(checked_channels(channels, heads)),
      heads_(heads),
      c_attn_(register_module("c_attn", std::make_unique<Linear>(channels, 3 * channels, bias))),
      c_proj_(register_module("c_proj", std::make_unique<Linear>(channels, channels, bias))),
      dropout_(register_module("resid_dropout", std::make_unique<Dropout>(dropout, generator))),
      attn_dropout_(dropout),
      attn_key_(generator.next_u64()) {}

std::string CausalSelfAttention::options() const {
  return detail::concat("channels=", channels_, ", heads=", heads_);
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  ALLOY_CHECK(x.ndim() == 3 && x.dim(2) == channels_, "CausalSelfAttention: input ", x.str(),
              " is not [B, T, ", channels_, "]");
  const std::int64_t batch = x.dim(0);
  const Tensor qkv = sequences(c_attn_.forward(rows(x)), batch);
  const bool drops = training() && attn_dropout_ > 0.0f;
  AttentionDropout dropout;
  if (drops) {
    const DropoutStream* stream = active_dropout_stream();
    ALLOY_CHECK(stream != nullptr, "CausalSelfAttention (dropout ", attn_dropout_,
                "): a training forward needs the step's random stream; run it inside an "
                "nn::DropoutStreamScope");
    dropout = {make_dropout_mask("CausalSelfAttention", attn_dropout_, attn_key_, stream->row_start,
                                 stream->row_stride),
               *stream->step_count};
  }
  AttentionResult attention =
      attention_forward(qkv, heads_, keeps_activations(), drops ? &dropout : nullptr);
  Tensor y = dropout_.forward(sequences(c_proj_.forward(rows(attention.y)), batch));
  if (keeps_activations()) {
    qkv_ = qkv;
    y_ = std::move(attention.y);
    lse_ = std::move(attention.lse);
    attention_dropout_ = dropout;
    dropped_ = drops;
  }
  return y;
}

Tensor CausalSelfAttention::backward(const Tensor& dy) {
  ALLOY_CHECK(qkv_.defined(), "CausalSelfAttention (", c_attn_.weight().name,
              "): backward without a training forward");
  const std::int64_t batch = dy.dim(0);
  const Tensor d_attention = sequences(c_proj_.backward(rows(dropout_.backward(dy))), batch);
  const Tensor dqkv = attention_backward(d_attention, qkv_, y_, lse_, heads_,
                                         dropped_ ? &attention_dropout_ : nullptr);
  attention_dropout_ = {};
  qkv_ = Tensor();
  y_ = Tensor();
  lse_ = Tensor();
  c_attn_.set_needs_input_grad(needs_input_grad());
  const Tensor dx = c_attn_.backward(rows(dqkv));
  return dx.defined() ? sequences(dx, batch) : Tensor();
}

}  // namespace alloy::nn
