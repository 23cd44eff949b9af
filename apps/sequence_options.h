// The flags of `alloy train` for sequence models (--model gpt, gpt2, gpt-shakespeare; nanoGPT's
// names): the model's shape, the token data, evaluation, and AdamW's betas and eps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "core/models/gpt.h"

namespace alloy::app {

struct TrainOptions;

struct SequenceOptions {
  models::GptConfig gpt;  // the --model preset's, then the flags given
  std::string data_file;  // --dataset text: the text; tokens: the training tokens
  std::string val_file;   // --dataset tokens: the validation tokens (default: none)
  double val_fraction = 0.1;
  std::int64_t eval_every = 0;  // steps; 0: only at the end
  std::int64_t eval_batches = 20;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

  // The model flags as parsed; resolve_sequence_options lays the given ones over the preset.
  struct Flags {
    int n_layer = 0, n_head = 0, n_embd = 0, block_size = 0, vocab_size = 0;
    double dropout = 0;
    std::string bias;
  } flags;
};

// The flags, bound to `options` (defaults are the struct's initial values).
po::options_description sequence_options_description(SequenceOptions& options);

// The model's flags alone (--n-layer ... --bias), for commands that build a GPT without data
// (alloy mem).
po::options_description gpt_model_options(SequenceOptions::Flags& flags);
// The preset of `model` with the flags that `given` names laid over it; UsageError for a bad
// value or an unbuildable config (models::check_gpt_config).
models::GptConfig resolve_gpt_config(const std::string& model, const SequenceOptions::Flags& flags,
                                     const std::function<bool(const std::string&)>& given);
// The long names of gpt_model_options's flags.
const std::vector<std::string>& gpt_model_flags();

// Settles options.text for a sequence model: the preset of --model, the given flags on top,
// and the usage errors of a bad combination (--n-embd not divisible by --n-head, a dataset that
// is not a token stream, no --steps, ...). For other models, a UsageError when a sequence flag
// was given.
void resolve_sequence_options(TrainOptions& options);

}  // namespace alloy::app
