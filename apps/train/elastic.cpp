#include "apps/train/elastic.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>

#include "apps/train/data_parallel.h"
#include "apps/train/training_state.h"
#include "core/error.h"
#include "core/setting_error.h"
#include "parallel/elastic.h"

namespace alloy::app {

namespace ckpt = alloy::checkpoint;

namespace {

std::string describe_resume(const std::optional<ckpt::LoadedCheckpoint>& resume) {
  if (!resume) return "a fresh start";
  return detail::concat("step ", resume->state.step, " (params_digest ",
                        resume->state.params_digest, ")");
}

}  // namespace

WorkerRestart worker_restart_from_environment() {
  WorkerRestart restart;
  if (const char* text = std::getenv(kRestartGenerationVariable)) {
    const char* end = text + std::char_traits<char>::length(text);
    const auto [stop, error] = std::from_chars(text, end, restart.generation);
    if (*text == '\0' || error != std::errc() || stop != end || restart.generation < 0) {
      usage_fail(kRestartGenerationVariable, "='", text, "' is not a generation number");
    }
  }
  if (const char* cause = std::getenv(kRestartCauseVariable)) restart.cause = cause;
  return restart;
}

void check_elastic_options(const TrainConfig& o, const parallel::Rendezvous& placement) {
  if (o.max_restarts > 0 && o.checkpoint_dir.empty()) {
    setting_fail("{max_restarts} ", o.max_restarts,
                 " needs {checkpoint_dir}: restarted workers resume from its newest checkpoint");
  }
  if (o.async_checkpoint && o.checkpoint_dir.empty()) {
    setting_fail("{async_checkpoint} needs {checkpoint_dir}");
  }
  const bool own_placement = placement.source == "--nodes/--gpus/--nr" ||
                             placement.source == "single process" ||
                             placement.source == "alloy launcher";
  if (o.max_restarts > 0 && !own_placement) {
    setting_fail(
        "{max_restarts} restarts the workers of alloy's own launcher ({nodes}, {gpus}, "
        "{nr}), but this process was started by ",
        placement.source,
        ": use that launcher's restarts (torchrun --max-restarts) with "
        "{resume} auto");
  }
}

void make_elastic_launcher(const TrainConfig& o, parallel::Rendezvous& placement) {
  if (o.max_restarts == 0 || placement.source == "alloy launcher") return;
  placement.local_workers = o.gpus;
  placement.rank = o.nr * o.gpus;
  placement.world_size = o.nodes * o.gpus;
}

std::optional<ckpt::LoadedCheckpoint> newest_readable_checkpoint(const std::string& dir,
                                                                 const ckpt::WarningSink& warn,
                                                                 bool gather) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return std::nullopt;
  const std::vector<ckpt::CheckpointEntry> entries = ckpt::list_checkpoints(dir);
  for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
    try {
      return ckpt::open_checkpoint(entry->path, gather);
    } catch (const Error& damaged) {
      if (warn) warn(std::string(damaged.what()) + "; skipping it");
    }
  }
  return std::nullopt;
}

std::optional<ckpt::LoadedCheckpoint> load_resume(const TrainConfig& o,
                                                  const ckpt::WarningSink& warn) {
  if (o.resume.empty()) return std::nullopt;
  // A sharded run reads only its own range of a sharded checkpoint.
  const bool gather = o.zero == 0;
  if (o.resume != "auto") return load_resume_checkpoint(o.resume, warn, gather);
  if (o.checkpoint_dir.empty()) {
    setting_fail("{resume} auto needs {checkpoint_dir} (the directory to resume from)");
  }
  auto found = newest_readable_checkpoint(o.checkpoint_dir, warn, gather);
  if (!found && warn) {
    warn("--resume auto: no readable checkpoint in " + o.checkpoint_dir + "; starting fresh");
  }
  return found;
}

void check_ranks_agree(parallel::ProcessGroup& group, const WorkerRestart& restart,
                       const std::optional<ckpt::LoadedCheckpoint>& resume) {
  const std::string mine = detail::concat("generation ", restart.generation, ", resuming from ",
                                          describe_resume(resume));
  const std::vector<std::string> all = group.allgather_bytes(mine);
  for (std::size_t rank = 1; rank < all.size(); ++rank) {
    if (all[rank] != all[0]) {
      setting_failure("the ranks of this job disagree: rank 0 is at ", all[0], ", rank ", rank,
                      " at ", all[rank],
                      " (a worker of another generation, or a {checkpoint_dir} that the nodes do "
                      "not share)");
    }
  }
}

}  // namespace alloy::app
