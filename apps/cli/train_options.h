// Every flag of `alloy train`, with its default, and the validation that turns bad values into
// UsageErrors naming the flag. The flags fill a TrainConfig (apps/train/train_config.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "apps/cli/cli.h"
#include "apps/train/train_config.h"
#include "core/checkpoint/checkpoint_file.h"

namespace alloy::app {

// A TrainConfig as the command line gives it: the flags' values, and what the command itself
// does with them.
struct TrainOptions : TrainConfig {
  std::string log_json;  // empty: no JSON log; "-": standard output
  std::string config;    // the config file (--config)

  // Whether `flag` (its long name, "batch-size") was on the command line or in the config file.
  bool was_given(const std::string& flag) const;
};

// The `alloy train` options, bound to `options` (defaults are the struct's initial values).
po::options_description train_options_description(TrainOptions& options);

// Parses and validates the words after `alloy train`; the config file (--config) fills in
// what the command line did not set. Throws UsageError for bad flags and values, Error when
// the config file cannot be read.
TrainOptions parse_train_options(const std::vector<std::string>& args);

// For --help.
void print_train_help();

// `alloy train` for sequence models, after the options are parsed from `args` and settled with
// the checkpoint to resume from, if any (apps/cli/lm_train_command.cpp).
int run_lm_train(TrainOptions options, const std::vector<std::string>& args,
                 std::optional<checkpoint::LoadedCheckpoint> resume);

}  // namespace alloy::app
