// Training that heals itself: `--max-restarts N` and `--resume auto`.
//
// With --max-restarts N > 0 every node runs a launcher, even for one worker. The launchers
// agree on each generation of workers through parallel/elastic.h: when a worker of any node
// exits non-zero or dies, every launcher stops its workers and starts them again, up to N
// times, resuming from the newest readable checkpoint in --checkpoint-dir (chosen once, by node
// 0's launcher, so every rank resumes from the same file; the directory must be shared between
// nodes). Workers learn their generation and the cause of the restart from the environment;
// rank 0 writes a `restart` event to the JSON log (appending to the log of the generations
// before) before its `start` event.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "apps/train/train_config.h"
#include "core/checkpoint/checkpoint_file.h"
#include "parallel/process_group.h"
#include "parallel/rendezvous.h"

namespace alloy::app {

// Variables the elastic launcher gives its workers.
inline constexpr const char* kRestartGenerationVariable = "ALLOY_RESTART_GENERATION";
inline constexpr const char* kRestartCauseVariable = "ALLOY_RESTART_CAUSE";

// What a worker knows about the generation it belongs to.
struct WorkerRestart {
  int generation = 0;  // 0: the first start (or not started by an elastic launcher)
  std::string cause;   // why this generation was started
};
WorkerRestart worker_restart_from_environment();

// Usage errors of the flags of this file: --max-restarts N > 0 needs --checkpoint-dir (as
// load_resume checks --resume auto does); --max-restarts needs Alloy's own launcher (not
// torchrun, mpirun or srun).
void check_elastic_options(const TrainConfig& options, const parallel::Rendezvous& placement);

// With --max-restarts N > 0, this process (unless it is a worker) becomes the launcher of its
// node's workers, even of one.
void make_elastic_launcher(const TrainConfig& options, parallel::Rendezvous& placement);

// The checkpoint --resume names: FILE, the newest readable one in DIR (an error when there is
// none), or with `auto` the newest readable one in --checkpoint-dir, nothing when there is none
// (a UsageError without --checkpoint-dir).
// With --zero 1 a sharded checkpoint is opened for range reads, else gathered.
std::optional<checkpoint::LoadedCheckpoint> load_resume(const TrainConfig& options,
                                                        const checkpoint::WarningSink& warn);

// The newest checkpoint of `dir` that reads cleanly (damaged newer ones go to `warn`), or
// nothing when `dir` is missing or holds none; a sharded one gathered, or with `gather` false
// opened for range reads (checkpoint::open_checkpoint).
std::optional<checkpoint::LoadedCheckpoint> newest_readable_checkpoint(
    const std::string& dir, const checkpoint::WarningSink& warn, bool gather = true);

// After joining the process group: every rank belongs to the same generation and resumes
// from the same checkpoint (same step and weights). Throws naming the ranks that differ, e.g.
// when --checkpoint-dir is not shared between nodes.
void check_ranks_agree(parallel::ProcessGroup& group, const WorkerRestart& restart,
                       const std::optional<checkpoint::LoadedCheckpoint>& resume);

}  // namespace alloy::app
