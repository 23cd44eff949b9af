#include "apps/cli/launcher.h"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "apps/train/data_parallel.h"
#include "apps/train/device_choice.h"
#include "apps/train/elastic.h"
#include "core/error.h"
#include "core/setting_error.h"
#include "parallel/elastic.h"
#include "parallel/launcher.h"

namespace alloy::app {

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

}  // namespace

void run_launcher(const TrainOptions& options, const parallel::Rendezvous& placement,
                  const std::vector<std::string>& args) {
  // The last worker has the highest local rank: if its device is there, all of theirs are.
  parallel::Rendezvous last = placement;
  last.local_rank = placement.local_workers - 1;
  const CudaDevices cuda = options.device == "cpu" ? CudaDevices{} : probe_cuda_devices();
  dist_backend(options, choose_device(options.device, last, cuda));  // throws what a worker would

  std::vector<std::string> worker_args{"train"};
  worker_args.insert(worker_args.end(), args.begin(), args.end());
  if (!options.was_given("threads")) {
    // The workers share this node's cores.
    const int share = std::max(1, options.threads / placement.local_workers);
    worker_args.insert(worker_args.end(), {"--threads", std::to_string(share)});
  }
  const parallel::LaunchResult result = parallel::launch_workers(placement, worker_args);
  if (result.ok()) return;
  const std::string message =
      detail::concat("data-parallel training on this node (ranks ", placement.rank, "..",
                     placement.rank + placement.local_workers - 1, " of ", placement.world_size,
                     ") failed: ", result.message());
  if (result.exit_status() == 2) throw UsageError(message);
  throw Error(message);
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
      setting_failure(job, " after ", o.max_restarts, " restart", o.max_restarts == 1 ? "" : "s",
                      " ({max_restarts} ", o.max_restarts, "): ", verdict.cause);
    }
    cause = verdict.cause;
  }
}

}  // namespace alloy::app
