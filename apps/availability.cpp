#include "apps/availability.h"

#include "core/error.h"

namespace alloy::app {

void check_train_features_available(const TrainOptions& /*o*/) {
  // Every flag of `alloy train` has landed: checkpoints, mixed precision and data parallelism.
}

void command_not_available(const char* command, const char* missing_piece) {
  fail("`alloy ", command, "` is not available yet: ", missing_piece, " has not landed");
}

}  // namespace alloy::app
