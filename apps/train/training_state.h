// Between a Trainer and a checkpoint::CheckpointState: what `alloy train` saves (the
// canonical fp32 weights, buffers, optimizer and loss-scaler state, opt-level properties,
// position, seed and the epoch's partial sums) and how a run resumes from it, at the same or
// another opt level. Also the --resume lookup of `alloy train` (saving: apps/train/checkpointer.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/train/train_config.h"
#include "apps/train/trainer.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/checkpoint/sharded_checkpoint.h"
#include "parallel/zero_shards.h"

namespace alloy::app {

using WarningSink = std::function<void(const std::string&)>;

// Everything needed to continue `trainer` bit-exactly from where it stands now. On a GPU each
// tensor is a synchronous download (the host waits for the device).
checkpoint::CheckpointState capture_training_state(Trainer& trainer);

// A rank's part of a sharded (--zero 1) run's checkpoint: the state every rank shares (without
// the weights and the optimizer's state tensors; params_digest gathered from every rank's shard)
// and this rank's range of each flat kind, in host memory (core/checkpoint/sharded_checkpoint.h).
struct ShardedCapture {
  checkpoint::CheckpointState shared;
  std::int64_t total = 0;
  parallel::ShardRange range;
  std::vector<checkpoint::FlatRange> ranges;
  std::vector<checkpoint::TensorSpec> parameters;  // the canonical weights' names and shapes
};

// Takes it where `trainer` stands now; a collective (params_digest): every rank calls it. On a
// GPU each tensor is a synchronous download.
ShardedCapture capture_sharded_state(Trainer& trainer);

class StateSnapshot;

// Pinned host memory that asynchronous saves on a GPU copy the state's device tensors into:
// one arena, reused from save to save and grown when the state outgrows it. It holds one
// snapshot at a time, and is freed only once no copy into it is still running. On the CPU it
// stays empty.
class SnapshotArena {
 public:
  SnapshotArena();
  ~SnapshotArena();
  SnapshotArena(const SnapshotArena&) = delete;
  SnapshotArena& operator=(const SnapshotArena&) = delete;

  struct Impl;  // the CUDA path's pinned memory and event

 private:
  friend class StateSnapshot;
  friend StateSnapshot snapshot_training_state(Trainer& trainer, SnapshotArena& arena);
  std::unique_ptr<Impl> impl_;
};

// An asynchronous save's snapshot of a trainer at one step. On the CPU, the captured state
// itself. On a GPU, the host fields and, for every device tensor, a copy into the arena queued
// on the device's stream, then one event after them: the copies run before any work queued
// later on that stream (the next steps), so they read this step's values, and the host waits
// for them only in take(), on the thread that writes the file.
class StateSnapshot {
 public:
  StateSnapshot();
  // A snapshot that is `state` itself, a copy in host memory the caller has taken.
  explicit StateSnapshot(checkpoint::CheckpointState state);
  ~StateSnapshot();
  StateSnapshot(StateSnapshot&& other) noexcept;
  StateSnapshot& operator=(StateSnapshot&& other) noexcept;

  // The state. On a GPU, first waits for the copies (a host wait, on the calling thread) and
  // reads them out of the arena, which the next snapshot may then reuse. Once per snapshot.
  checkpoint::CheckpointState take();

  struct Queued;  // a device tensor copied into the arena

 private:
  friend StateSnapshot snapshot_training_state(Trainer& trainer, SnapshotArena& arena);

  checkpoint::CheckpointState state_;  // complete on the CPU; the host fields on a GPU
  std::vector<Queued> queued_;         // on a GPU: what take() reads out of the arena
  SnapshotArena* arena_ = nullptr;
};

// The snapshot of `trainer` where it stands now, for an asynchronous save: on a GPU without any
// host wait (core/round_trips.h: one queued download per device tensor). The snapshot in
// `arena` before it must have been taken.
StateSnapshot snapshot_training_state(Trainer& trainer, SnapshotArena& arena);

// Loads `state` (read from `path`, named in errors) into a freshly built `trainer`: the
// weights into the canonical parameters and from there into the half model, buffers,
// optimizer state and step count, the loss scaler (when both runs scale dynamically) and the
// position. Throws when the checkpoint holds another model, other shapes or another optimizer.
// Recoverable differences (optimizer state this run does not use, or needs and the checkpoint
// lacks) go to `warn`.
void restore_training_state(Trainer& trainer, const checkpoint::CheckpointState& state,
                            const std::string& path, const WarningSink& warn);

// restore_training_state for a sharded (--zero 1) run: this rank reads its range of the
// weights and of each optimizer kind from the shards of a sharded checkpoint opened without
// gathering (`loaded.manifest`), or takes it from the full tensors of a plain one, and the model's
// weights are gathered from every rank's shard (a collective). An optimizer kind the checkpoint
// lacks starts at zero, with a warning.
void restore_sharded_training_state(Trainer& trainer, const checkpoint::LoadedCheckpoint& loaded,
                                    const WarningSink& warn);

// --resume FILE|DIR: the file, or the newest valid checkpoint in the directory (damaged
// newer ones are reported to `warn` and skipped). Throws naming the file or directory. A
// sharded checkpoint is gathered into one plain state, or with `gather` false opened for range
// reads (checkpoint::open_checkpoint).
checkpoint::LoadedCheckpoint load_resume_checkpoint(const std::string& file_or_dir,
                                                    const WarningSink& warn, bool gather = true);

// The weight averages of `state` ("ema.<name>" beside the optimizer's state) into `precision`'s
// when it keeps averages; when the file has none they start from the weights (restored first),
// and averages this run does not keep are dropped, each with a note to `warn`. Returns how many
// averages the file holds.
std::size_t restore_weight_averages(amp::MixedPrecision& precision,
                                    const checkpoint::CheckpointState& state,
                                    const std::string& path, const WarningSink& warn);

// The settings of `options` that every trainer's checkpoint records (the image trainer adds its
// data's), for apply_checkpoint_defaults.
checkpoint::RunRecord run_record(const TrainConfig& options);

// Fills the options the user did not give from the checkpoint, so `alloy train --resume DIR`
// alone continues the run: model, dataset, data directory, seed, batch size, optimizer and its
// hyper-parameters, the schedule and step settings, and the precision properties (when no
// precision flag was given). A sequence model's shape, data and length:
// resolve_sequence_options (apps/cli/sequence_flags.h).
void apply_checkpoint_defaults(const checkpoint::CheckpointState& state, TrainConfig& options);

// The options `alloy eval` rebuilds the checkpoint's model and data with.
TrainConfig options_from_checkpoint(const checkpoint::CheckpointState& state);

// The hex params_digest of the parameters stored in `state` (recomputed, not the stored field).
std::string stored_params_digest(const checkpoint::CheckpointState& state);

// The state with its weight averages (--ema-decay; optimizer state "ema.<name>") as its
// parameters and buffers, and the params_digest of those. Throws naming `path` when the state
// holds no averages, or not one for every parameter and buffer.
checkpoint::CheckpointState with_weight_averages(const checkpoint::CheckpointState& state,
                                                 const std::string& path);

}  // namespace alloy::app
