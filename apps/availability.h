// The flags of features that have not landed yet. The parser accepts them so scripts written
// against the full command line contract fail with a clear message rather than a usage error;
// each feature removes its check here when it lands.
#pragma once

#include "apps/train_options.h"

namespace alloy::app {

// Throws alloy::Error ("... is not available yet ...") for the first such flag in use.
void check_train_features_available(const TrainOptions& options);

// For the subcommands that have not landed: always throws, naming the command.
[[noreturn]] void command_not_available(const char* command, const char* missing_piece);

}  // namespace alloy::app
