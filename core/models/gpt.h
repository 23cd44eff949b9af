// GPT-2 (Radford et al. 2019) as nanoGPT builds it: token + position embedding, dropout,
// n_layer pre-norm blocks x + attn(ln_1(x)), x + mlp(ln_2(x)) (mlp: linear C -> 4C, GELU
// with the tanh approximation, linear 4C -> C, dropout), a final layer norm, and the output
// head tied to the token embedding, whose loss is taken in row chunks (core/ops/lm_head_loss.h).
// Initialisation as nanoGPT: every linear weight and both embeddings N(0, 0.02), the residual
// projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, layer norms
// weight 1 and bias 0, drawn in parameter order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/nn/layer_norm.h"
#include "core/nn/module.h"
#include "core/nn/sequential.h"
#include "core/nn/token_position_embedding.h"
#include "core/random.h"

namespace alloy::models {

// nanoGPT's GPTConfig, under its flag names.
struct GptConfig {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int block_size = 1024;
  int vocab_size = 50257;
  float dropout = 0.0f;
  bool bias = true;  // in the linear layers and the layer norms
};

// Presets: "gpt2" (12 layers, 12 heads, 768 wide, context 1024, 50257 tokens, bias: GPT-2
// small, 124,439,808 parameters) and "gpt-shakespeare" (nanoGPT's shakespeare_char: 6/6/384,
// context 256, dropout 0.2, no bias; vocabulary from the data). "gpt" is the default above.
// Whether `model` names a GPT (a sequence model) at all.
bool is_gpt_model(const std::string& model);
GptConfig gpt_preset(const std::string& model);

// Throws UsageError for a config no model can be built from (n_embd not a multiple of n_head,
// sizes below 1, dropout outside [0, 1)).
void check_gpt_config(const GptConfig& config);

class Gpt : public nn::Module {
 public:
  Gpt(const GptConfig& config, Generator& generator);

  // tokens: i32 [B, T], T <= block_size. Returns the final layer norm's output [B, T, C].
  Tensor forward(const Tensor& tokens) override;
  // dh: the gradient of forward's output; returns no input gradient.
  Tensor backward(const Tensor& dh) override;
  std::string type_name() const override { return "GPT"; }
  std::string options() const override;

  // The tied head and the loss of hidden states h [B, T, C] against targets i32 [B, T]: adds the
  // loss to `tally` (core/ops/step_tally.h) and the table's gradient to wte's, and returns dh,
  // scaled by loss_scale / gradient_rows (0: the B * T rows of h). label_smoothing: as
  // lm_head_loss_step's.
  Tensor loss_step(const Tensor& h, const Tensor& targets, const Tensor& loss_scale, Tensor& tally,
                   std::int64_t gradient_rows = 0, float label_smoothing = 0.0f);
  // Evaluation: the loss only, added to `tally`.
  void loss(const Tensor& h, const Tensor& targets, Tensor& tally);
  // Logits of the last position of each sequence, [B, V] in f32 (generation).
  Tensor last_logits(const Tensor& h);

  const GptConfig& config() const { return config_; }

 private:
  GptConfig config_;
  nn::TokenPositionEmbedding& embedding_;
  nn::Module& dropout_;
  nn::Sequential& blocks_;
  nn::LayerNorm& ln_f_;
};

std::unique_ptr<Gpt> make_gpt(const GptConfig& config, Generator& generator);

}  // namespace alloy::models
