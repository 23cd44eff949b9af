// alloy eval for sequence models: the checkpoint's GPT on the validation split of the data it
// was trained on (or of --data-file / --val-file), every token predicted once, as the `end`
// event of alloy train measures it.
#pragma once

#include <ostream>
#include <string>

#include "apps/cli/cli.h"
#include "apps/cli/json_log.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/device.h"

namespace alloy::app {

// `values`: alloy eval's parsed flags; `threads`: the CPU threads it runs with; `log`: null for
// none. Prints one line to `human` and an `eval` event to the log; returns the exit status.
int run_lm_eval(checkpoint::LoadedCheckpoint loaded, const po::variables_map& values, Device device,
                int threads, JsonLog* log, std::ostream& human);

}  // namespace alloy::app
