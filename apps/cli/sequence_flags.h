// The flags of `alloy train` for sequence models (--model gpt, gpt2, gpt-shakespeare; nanoGPT's
// names), bound to a SequenceOptions, and their resolution into a GPT's shape.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "apps/cli/cli.h"
#include "apps/train/sequence_options.h"
#include "core/checkpoint/checkpoint_file.h"

namespace alloy::app {

struct TrainOptions;

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

// Settles options.text for a sequence model: the preset of --model (resuming the same model:
// the checkpoint's shape, data, evaluation and --steps), the given flags on top, and the usage
// errors of a bad combination (--n-embd not divisible by --n-head, a dataset that is not a token
// stream, no --steps, ...). For other models, a UsageError when a sequence flag was given.
void resolve_sequence_options(TrainOptions& options,
                              const checkpoint::LoadedCheckpoint* resumed = nullptr);

}  // namespace alloy::app
