#include "core/models/gpt.h"

#include <cmath>

#include "core/models/init.h"
#include "core/nn/cast_policy.h"
#include "core/nn/causal_self_attention.h"
#include "core/nn/dropout.h"
#include "core/nn/gelu.h"
#include "core/nn/input_dtype.h"
#include "core/nn/linear.h"
#include "core/nn/residual.h"
#include "core/ops/elementwise.h"
#include "core/ops/linear.h"
#include "core/ops/lm_head_loss.h"

namespace alloy::models {

namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr double kInitStd = 0.02;

// nanoGPT's MLP on [B, T, C]: c_fc (C -> 4C), GELU (tanh), c_proj (4C -> C), dropout.
class GptMlp : public nn::Module {
 public:
  GptMlp(int channels, bool bias, float dropout, Generator& generator)
      : c_fc_(register_module("c_fc", std::make_unique<nn::Linear>(channels, 4 * channels, bias))),
        gelu_(register_module("gelu", std::make_unique<nn::GELU>(GeluApproximation::tanh))),
        c_proj_(
            register_module("c_proj", std::make_unique<nn::Linear>(4 * channels, channels, bias))),
        dropout_(register_module("dropout", std::make_unique<nn::Dropout>(dropout, generator))) {}

  Tensor forward(const Tensor& x) override {
    const std::int64_t batch = x.dim(0), time = x.dim(1);
    const Tensor h = gelu_.forward(c_fc_.forward(x.reshape({batch * time, x.dim(2)})));
    const Tensor y = c_proj_.forward(h);
    return dropout_.forward(y.reshape({batch, time, y.dim(1)}));
  }
  Tensor backward(const Tensor& dy) override {
    const std::int64_t batch = dy.dim(0), time = dy.dim(1);
    const Tensor d = dropout_.backward(dy);
    const Tensor dh = gelu_.backward(c_proj_.backward(d.reshape({batch * time, d.dim(2)})));
    c_fc_.set_needs_input_grad(needs_input_grad());
    const Tensor dx = c_fc_.backward(dh);
    return dx.defined() ? dx.reshape({batch, time, dx.dim(1)}) : Tensor();
  }
  std::string type_name() const override { return "MLP"; }

  nn::Linear& c_fc() { return c_fc_; }
  nn::Linear& c_proj() { return c_proj_; }

 private:
  nn::Linear& c_fc_;
  nn::Module& gelu_;
  nn::Linear& c_proj_;
  nn::Module& dropout_;
};

// A transformer block is the unit of --recompute blocks: its backward runs its forward again
// from the block's input, the one activation it keeps.
class GptBlock : public nn::Sequential {
 public:
  bool is_block() const override { return true; }
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)).
std::unique_ptr<nn::Module> gpt_block(const GptConfig& c, Generator& generator) {
  auto attention = std::make_unique<nn::Sequential>();
  attention->add("ln_1", std::make_unique<nn::LayerNorm>(c.n_embd, kLayerNormEps, c.bias));
  attention->add("attn", std::make_unique<nn::CausalSelfAttention>(c.n_embd, c.n_head, c.bias,
                                                                   c.dropout, generator));
  auto mlp = std::make_unique<nn::Sequential>();
  mlp->add("ln_2", std::make_unique<nn::LayerNorm>(c.n_embd, kLayerNormEps, c.bias));
  mlp->add("mlp", std::make_unique<GptMlp>(c.n_embd, c.bias, c.dropout, generator));
  auto block = std::make_unique<GptBlock>();
  block->add("attn", std::make_unique<nn::Residual>(std::move(attention)));
  block->add("mlp", std::make_unique<nn::Residual>(std::move(mlp)));
  return block;
}

std::unique_ptr<nn::Sequential> gpt_blocks(const GptConfig& c, Generator& generator) {
  auto blocks = std::make_unique<nn::Sequential>();
  for (int i = 0; i < c.n_layer; ++i)
    blocks->add(std::to_string(i), gpt_block(c, generator));
  return blocks;
}

bool is_residual_projection(const std::string& name) {
  const auto ends_with = [&name](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight");
}

}  // namespace

bool is_gpt_model(const std::string& model) {
  return model == "gpt" || model == "gpt2" || model == "gpt-shakespeare";
}

GptConfig gpt_preset(const std::string& model) {
  GptConfig config;
  if (model == "gpt-shakespeare") {
    config.n_layer = 6;
    config.n_head = 6;
    config.n_embd = 384;
    config.block_size = 256;
    config.dropout = 0.2f;
    config.bias = false;
  }
  return config;  // "gpt" and "gpt2": GPT-2 small
}

void check_gpt_config(const GptConfig& c) {
  if (c.n_layer < 1) usage_fail("--n-layer must be at least 1, got ", c.n_layer);
  if (c.n_head < 1) usage_fail("--n-head must be at least 1, got ", c.n_head);
  if (c.n_embd < 1) usage_fail("--n-embd must be at least 1, got ", c.n_embd);
  if (c.n_embd % c.n_head != 0) {
    usage_fail("--n-embd ", c.n_embd, " is not divisible by --n-head ", c.n_head);
  }
  if (c.block_size < 1) usage_fail("--block-size must be at least 1, got ", c.block_size);
  if (c.vocab_size < 1) usage_fail("--vocab-size must be at least 1, got ", c.vocab_size);
  if (!(c.dropout >= 0.0f && c.dropout < 1.0f)) {
    usage_fail("--dropout must be in [0, 1), got ", c.dropout);
  }
}

Gpt::Gpt(const GptConfig& config, Generator& generator)
    : config_(config),
      embedding_(
          register_module("transformer", std::make_unique<nn::TokenPositionEmbedding>(
                                             config.vocab_size, config.block_size, config.n_embd))),
      dropout_(register_module("drop", std::make_unique<nn::Dropout>(config.dropout, generator))),
      blocks_(register_module("h", gpt_blocks(config, generator))),
      ln_f_(register_module(
          "ln_f", std::make_unique<nn::LayerNorm>(config.n_embd, kLayerNormEps, config.bias))) {
  const double projection_std = kInitStd / std::sqrt(2.0 * config.n_layer);
  for (nn::Parameter* param : parameters()) {
    if (param->is_norm) continue;            // layer norms keep weight 1, bias 0
    if (param->value.ndim() == 1) continue;  // biases stay 0
    init_normal(param->value, is_residual_projection(param->name) ? projection_std : kInitStd,
                generator);
  }
}

std::string Gpt::options() const {
  return detail::concat("n_layer=", config_.n_layer, ", n_head=", config_.n_head,
                        ", n_embd=", config_.n_embd, ", block_size=", config_.block_size,
                        ", vocab_size=", config_.vocab_size, ", dropout=", config_.dropout,
                        ", bias=", config_.bias ? "true" : "false");
}

Tensor Gpt::forward(const Tensor& tokens) {
  ALLOY_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::i32, "GPT: tokens ", tokens.str(),
              " are not i32 [B, T]");
  ALLOY_CHECK(tokens.dim(1) <= config_.block_size, "GPT: sequences of ", tokens.dim(1),
              " tokens are longer than the block size ", config_.block_size);
  Tensor x = embedding_.forward(tokens);
  x = dropout_.forward(x);
  x = blocks_.forward(x);
  return ln_f_.forward(x);
}

Tensor Gpt::backward(const Tensor& dh) {
  Tensor d = ln_f_.backward(dh);
  d = blocks_.backward(d);
  d = dropout_.backward(d);
  embedding_.backward(d);
  notify_grads_ready();
  return Tensor();
}

Tensor Gpt::loss_step(const Tensor& h, const Tensor& targets, const Tensor& loss_scale,
                      Tensor& tally, std::int64_t gradient_rows, float label_smoothing) {
  // The head is a linear layer: O1 computes it in half from the fp32 residual stream. The op
  // rounds O1's fp32 table itself (on the CPU a block at a time): no cached half copy.
  const DType compute =
      nn::compute_dtype(nn::OpClass::half_compute, h.dtype(), embedding_.wte().value.dtype());
  const Tensor rows = nn::in_dtype(h, compute).reshape({h.dim(0) * h.dim(1), h.dim(2)});
  const Tensor dh =
      lm_head_loss_step(rows, embedding_.wte().value, targets.reshape({rows.dim(0)}), loss_scale,
                        tally, embedding_.wte_grad(), gradient_rows, 0, label_smoothing);
  return nn::in_dtype(dh, h.dtype()).reshape(h.shape());
}

void Gpt::loss(const Tensor& h, const Tensor& targets, Tensor& tally) {
  const DType compute =
      nn::compute_dtype(nn::OpClass::half_compute, h.dtype(), embedding_.wte().value.dtype());
  const Tensor rows = nn::in_dtype(h, compute).reshape({h.dim(0) * h.dim(1), h.dim(2)});
  lm_head_loss(rows, embedding_.wte().value, targets.reshape({rows.dim(0)}), tally);
}

Tensor Gpt::last_logits(const Tensor& h) {
  const std::int64_t batch = h.dim(0), time = h.dim(1), channels = h.dim(2);
  Tensor last = Tensor::empty({batch, channels}, h.dtype(), h.device(), MemoryCategory::workspace);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::size_t element = dtype_size(h.dtype());
    Tensor row =
        last.view(static_cast<std::size_t>(b * channels) * element, {1, channels}, h.dtype());
    row.copy_from(h.view(static_cast<std::size_t>((b * time + time - 1) * channels) * element,
                         {1, channels}, h.dtype()));
  }
  // O1's half copy of the fp32 table is cached: generation calls this once per token.
  const Tensor logits =
      linear_forward(last, nn::cached_weight_cast(embedding_.wte().value, h.dtype()), Tensor());
  return logits.dtype() == DType::f32 ? logits : cast(logits, DType::f32);
}

std::unique_ptr<Gpt> make_gpt(const GptConfig& config, Generator& generator) {
  check_gpt_config(config);
  auto model = std::make_unique<Gpt>(config, generator);
  model->set_needs_input_grad(false);
  return model;
}

}  // namespace alloy::models
