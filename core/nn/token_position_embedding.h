// GPT-2's input layer (core/ops/embedding.h): token ids [B, T] (i32) to wte[token] + wpe[t],
// [B, T, C] in the tables' dtype. Parameters "wte" [V, C] and "wpe" [P, C], starting at zero:
// models initialise them. A tied output head reads wte and adds to its gradient (models/gpt.h).
#pragma once

#include "core/nn/module.h"

namespace alloy::nn {

class TokenPositionEmbedding : public Module {
 public:
  TokenPositionEmbedding(int vocab, int positions, int channels);

  // tokens: i32 [B, T] with T <= positions; backward returns no input gradient.
  Tensor forward(const Tensor& tokens) override;
  Tensor backward(const Tensor& dy) override;
  std::string type_name() const override { return "TokenPositionEmbedding"; }

  Parameter& wte() { return wte_; }
  Parameter& wpe() { return wpe_; }
  // The token table's gradient, allocated on first use (the tied head adds to it first).
  Tensor& wte_grad() { return grad_of(wte_); }

 private:
  Parameter& wte_;
  Parameter& wpe_;
  Tensor tokens_;  // until backward
};

}  // namespace alloy::nn
