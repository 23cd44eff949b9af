// Between a Trainer and a checkpoint::CheckpointState: what `alloy train` saves (the
// canonical fp32 weights, buffers, optimizer and loss-scaler state, opt-level properties,
// position, seed and the epoch's partial sums) and how a run resumes from it, at the same or
// another opt level. Also the --resume lookup of `alloy train` (saving: apps/checkpointer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "apps/train_options.h"
#include "apps/trainer.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/checkpoint_file.h"

namespace alloy::app {

using WarningSink = std::function<void(const std::string&)>;

// Everything needed to continue `trainer` bit-exactly from where it stands now.
checkpoint::CheckpointState capture_training_state(Trainer& trainer);

// Loads `state` (read from `path`, named in errors) into a freshly built `trainer`: the
// weights into the canonical parameters and from there into the half model, buffers,
// optimizer state and step count, the loss scaler (when both runs scale dynamically) and the
// position. Throws when the checkpoint holds another model, other shapes or another optimizer.
// Recoverable differences (optimizer state this run does not use, or needs and the checkpoint
// lacks) go to `warn`.
void restore_training_state(Trainer& trainer, const checkpoint::CheckpointState& state,
                            const std::string& path, const WarningSink& warn);

// --resume FILE|DIR: the file, or the newest valid checkpoint in the directory (damaged
// newer ones are reported to `warn` and skipped). Throws naming the file or directory.
checkpoint::LoadedCheckpoint load_resume_checkpoint(const std::string& file_or_dir,
                                                    const WarningSink& warn);

// Fills the options the user did not give from the checkpoint, so `alloy train --resume DIR`
// alone continues the run: model, dataset, data directory, seed, batch size, optimizer and its
// hyper-parameters, and the precision properties (when no precision flag was given).
void apply_checkpoint_defaults(const checkpoint::CheckpointState& state, TrainOptions& options);

// The options `alloy eval` rebuilds the checkpoint's model and data with.
TrainOptions options_from_checkpoint(const checkpoint::CheckpointState& state);

// The hex params_digest of the parameters stored in `state` (recomputed, not the stored field).
std::string stored_params_digest(const checkpoint::CheckpointState& state);

}  // namespace alloy::app
