// The launcher behind `alloy train --gpus G`: starts G worker processes of this program on this
// node, passes on SIGINT and SIGTERM, waits for all of them, and when one fails stops the
// others (SIGTERM, then SIGKILL after a grace period) so that nothing is left behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "parallel/rendezvous.h"

namespace alloy::parallel {

struct LauncherOptions {
  // The program each worker runs; this one by default.
  std::string executable = "/proc/self/exe";
  // How long a worker asked to stop (SIGTERM) may take before it is killed (SIGKILL).
  std::chrono::milliseconds grace = std::chrono::seconds(10);

  // For restarts (apps/train/elastic.h): variables added to every worker's environment, and a check
  // polled every `poll_interval` while the workers run; when it returns true they are stopped
  // as after a failure (SIGTERM, then SIGKILL after `grace`), and LaunchResult::stopped says so.
  std::vector<std::pair<std::string, std::string>> environment;
  std::function<bool()> should_stop;
  std::chrono::milliseconds poll_interval = std::chrono::milliseconds(200);
};

// How one worker ended.
struct WorkerExit {
  int rank = 0;
  pid_t pid = 0;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal killed it; 0 otherwise
  bool failed() const { return signal != 0 || exit_code != 0; }
  std::string str()
      const;  // "rank 1 (pid 4242) exited with status 3" / "... was killed by SIGKILL"
};

struct LaunchResult {
  std::vector<WorkerExit> workers;  // indexed by local rank
  int first_failure = -1;           // index into `workers` of the first to fail, or -1
  int interrupted_by = 0;           // the SIGINT or SIGTERM the launcher received and passed on
  bool stopped = false;             // LauncherOptions::should_stop asked the workers to stop

  bool ok() const { return first_failure < 0 && interrupted_by == 0 && !stopped; }
  // "rank 1 (pid 4242) exited with status 3; the other workers were stopped", or
  // "interrupted by SIGINT; ...": for the launcher's error message.
  std::string message() const;
  // The launcher's own exit status under the command-line contract: 0 on success, 2 when the
  // first worker to fail reported a usage error, else 1.
  int exit_status() const;
};

// Starts `placement.local_workers` copies of `options.executable` with `arguments` (argv after
// argv[0]), worker i with RANK = placement.rank + i, LOCAL_RANK = i, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT and ALLOY_WORKER=1 added to this process's environment, and waits for
// all of them. Workers die with the launcher (PR_SET_PDEATHSIG), even when it is killed.
// Throws alloy::Error when a worker cannot be started (after stopping those already running).
LaunchResult launch_workers(const Rendezvous& placement, const std::vector<std::string>& arguments,
                            const LauncherOptions& options = {});

}  // namespace alloy::parallel
