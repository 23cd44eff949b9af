#include "apps/elastic.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "apps/data_parallel.h"
#include "apps/training_state.h"
#include "core/error.h"
#include "parallel/elastic.h"
#include "parallel/launcher.h"

namespace alloy::app {

namespace ckpt = alloy::checkpoint;

namespace {

// True when args[i] is `flag` (its value in args[i + 1]) or `flag=VALUE`; sets `words` to the
// number of words the flag takes.
bool is_flag(const std::vector<std::string>& args, std::size_t i, const std::string& flag,
             std::size_t& words) {
  if (args[i] == flag) {
    words = i + 1 < args.size() ? 2 : 1;
    return true;
  }
  words = 1;
  return args[i].rfind(flag + "=", 0) == 0;
}

parallel::NodeReport report_of(const parallel::LaunchResult& result, int node) {
  parallel::NodeReport report;
  report.node = node;
  report.cause = result.message();
  using Outcome = parallel::NodeReport::Outcome;
  if (result.interrupted_by != 0) {
    report.outcome = Outcome::interrupted;
  } else if (result.first_failure >= 0) {
    const parallel::WorkerExit& first =
        result.workers[static_cast<std::size_t>(result.first_failure)];
    report.outcome = Outcome::failed;
    report.killed_by_signal = first.signal != 0;
    report.usage_error = first.signal == 0 && first.exit_code == 2;
    report.cause = first.str();
  } else if (result.stopped) {
    report.outcome = Outcome::stopped;
  }
  return report;
}

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

void check_elastic_options(const TrainOptions& o, const parallel::Rendezvous& placement) {
  if (o.max_restarts > 0 && o.checkpoint_dir.empty()) {
    usage_fail("--max-restarts ", o.max_restarts,
               " needs --checkpoint-dir: restarted workers resume from its newest checkpoint");
  }
  if (o.resume == "auto" && o.checkpoint_dir.empty()) {
    usage_fail("--resume auto needs --checkpoint-dir (the directory to resume from)");
  }
  if (o.async_checkpoint && o.checkpoint_dir.empty()) {
    usage_fail("--async-checkpoint needs --checkpoint-dir");
  }
  const bool own_placement = placement.source == "--nodes/--gpus/--nr" ||
                             placement.source == "single process" ||
                             placement.source == "alloy launcher";
  if (o.max_restarts > 0 && !own_placement) {
    usage_fail(
        "--max-restarts restarts the workers of alloy's own launcher (--nodes, --gpus, "
        "--nr), but this process was started by ",
        placement.source,
        ": use that launcher's restarts (torchrun --max-restarts) with "
        "--resume auto");
  }
}

void make_elastic_launcher(const TrainOptions& o, parallel::Rendezvous& placement) {
  if (o.max_restarts == 0 || placement.source == "alloy launcher") return;
  placement.local_workers = o.gpus;
  placement.rank = o.nr * o.gpus;
  placement.world_size = o.nodes * o.gpus;
}

std::optional<ckpt::LoadedCheckpoint> newest_readable_checkpoint(const std::string& dir,
                                                                 const ckpt::WarningSink& warn) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return std::nullopt;
  const std::vector<ckpt::CheckpointEntry> entries = ckpt::list_checkpoints(dir);
  for (auto entry = entries.rbegin(); entry != entries.rend(); ++entry) {
    try {
      return ckpt::LoadedCheckpoint{entry->path, ckpt::read_checkpoint(entry->path)};
    } catch (const Error& damaged) {
      if (warn) warn(std::string(damaged.what()) + "; skipping it");
    }
  }
  return std::nullopt;
}

std::optional<ckpt::LoadedCheckpoint> load_resume(const TrainOptions& o,
                                                  const ckpt::WarningSink& warn) {
  if (o.resume.empty()) return std::nullopt;
  if (o.resume != "auto") return load_resume_checkpoint(o.resume, warn);
  auto found = newest_readable_checkpoint(o.checkpoint_dir, warn);
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
      fail("the ranks of this job disagree: rank 0 is at ", all[0], ", rank ", rank, " at ",
           all[rank],
           " (a worker of another generation, or a --checkpoint-dir that the nodes do "
           "not share)");
    }
  }
}

std::vector<std::string> generation_arguments(const std::vector<std::string>& args, int port,
                                              const std::string& resume) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size();) {
    std::size_t words = 1;
    if (is_flag(args, i, "--master-port", words) ||
        (!resume.empty() && is_flag(args, i, "--resume", words))) {
      i += words;
      continue;
    }
    out.push_back(args[i++]);
  }
  out.insert(out.end(), {"--master-port", std::to_string(port)});
  if (!resume.empty()) out.insert(out.end(), {"--resume", resume});
  return out;
}

void run_elastic_launcher(const TrainOptions& o, const parallel::Rendezvous& placement,
                          const std::vector<std::string>& args) {
  const parallel::LauncherOptions defaults;
  // Between generations a node waits for the others to stop theirs: a collective timeout, the
  // grace before SIGKILL, and a margin for starting processes on a loaded machine.
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      kCollectiveTimeout + defaults.grace + std::chrono::seconds(60));
  parallel::ElasticAgent agent(placement.master_addr, placement.master_port, o.nodes, o.nr,
                               timeout);
  const std::string where = o.nodes > 1 ? "node " + std::to_string(o.nr) + ": " : "";
  const auto warn = [&where](const std::string& message) {
    std::cerr << "alloy: warning: " << where << message << std::endl;
  };
  std::string cause;
  for (int generation = 0;; ++generation) {
    std::string resume;
    if (generation > 0 && agent.coordinator()) {
      if (auto found = newest_readable_checkpoint(o.checkpoint_dir, warn)) resume = found->path;
    }
    const parallel::GenerationPlan plan = agent.begin(generation, resume, cause);
    if (generation > 0) {
      std::cerr << "alloy: " << where << "restart " << generation << " of at most "
                << o.max_restarts << " after: " << plan.cause << "; resuming from "
                << (plan.resume.empty() ? "the start (no checkpoint yet)" : plan.resume)
                << std::endl;
    }
    // As run_launcher: the words after `alloy train`, and an equal share of the cores.
    std::vector<std::string> worker_args{"train"};
    const std::vector<std::string> rewritten =
        generation_arguments(args, plan.worker_port, plan.resume);
    worker_args.insert(worker_args.end(), rewritten.begin(), rewritten.end());
    if (!o.was_given("threads")) {
      const int share = std::max(1, o.threads / placement.local_workers);
      worker_args.insert(worker_args.end(), {"--threads", std::to_string(share)});
    }
    parallel::Rendezvous workers = placement;
    workers.master_port = plan.worker_port;
    parallel::LauncherOptions options;
    options.environment = {{kRestartGenerationVariable, std::to_string(generation)},
                           {kRestartCauseVariable, plan.cause}};
    options.should_stop = [&agent, generation] { return agent.peer_failed(generation); };
    const parallel::LaunchResult result = parallel::launch_workers(workers, worker_args, options);

    const parallel::GenerationVerdict verdict =
        parallel::judge_generation(agent.finish(generation, report_of(result, o.nr)));
    using Action = parallel::GenerationVerdict::Action;
    if (verdict.action == Action::finish) return;
    const std::string job = detail::concat("data-parallel training (ranks ", placement.rank, "..",
                                           placement.rank + placement.local_workers - 1, " of ",
                                           placement.world_size, " on this node) failed");
    if (verdict.action == Action::give_up) {
      const std::string message = detail::concat(job, ": ", verdict.cause);
      if (verdict.usage_error) throw UsageError(message);
      throw Error(message);
    }
    if (generation >= o.max_restarts) {
      fail(job, " after ", o.max_restarts, " restart", o.max_restarts == 1 ? "" : "s",
           " (--max-restarts ", o.max_restarts, "): ", verdict.cause);
    }
    cause = verdict.cause;
  }
}

}  // namespace alloy::app
