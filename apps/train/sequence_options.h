// The settings of a training run for sequence models (models gpt, gpt2, gpt-shakespeare;
// nanoGPT's names): the model's shape, the token data, evaluation, and AdamW's betas and eps.
#pragma once

#include <cstdint>
#include <string>

#include "core/models/gpt.h"

namespace alloy::app {

struct SequenceOptions {
  models::GptConfig gpt;  // the model's preset, then the shape settings given
  std::string data_file;  // dataset text: the text; tokens: the training tokens
  std::string val_file;   // dataset tokens: the validation tokens (default: none)
  std::string init_from;  // a pretrained GPT-2's safetensors file (default: random weights)
  double val_fraction = 0.1;
  std::int64_t eval_every = 0;  // steps; 0: only at the end
  std::int64_t eval_batches = 20;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

  // The shape as given, laid over the preset where set (apps/cli/sequence_flags.h).
  struct Flags {
    int n_layer = 0, n_head = 0, n_embd = 0, block_size = 0, vocab_size = 0;
    double dropout = 0;
    std::string bias;
  } flags;
};

}  // namespace alloy::app
