// The command's launchers: the processes of a data-parallel job on this node, started as copies
// of this program with the words after `alloy train` (the rank in the environment), without and
// with restarts (--max-restarts, apps/train/elastic.h).
#pragma once

#include <string>
#include <vector>

#include "apps/cli/train_options.h"
#include "parallel/rendezvous.h"

namespace alloy::app {

// The launcher: first checks on this machine the device and backend its last worker would
// take (so that a missing GPU or too few of them is one error from the launcher, before any
// worker starts), then starts placement.local_workers copies of this program with `args` (the
// words after `alloy train`), each told its rank through the environment and, when --threads
// was not given, given an equal share of this process's cores. Waits for all of them; when one
// fails, the others are stopped and this throws an Error naming the rank that failed (a
// UsageError when that rank reported a usage error).
void run_launcher(const TrainOptions& options, const parallel::Rendezvous& placement,
                  const std::vector<std::string>& args);

// The launcher of this node's workers with restarts: returns when the job has finished; throws
// Error with the last cause after --max-restarts restarts (UsageError when a worker reported a
// usage error, which no restart mends), or when the launchers lose each other.
void run_elastic_launcher(const TrainOptions& options, const parallel::Rendezvous& placement,
                          const std::vector<std::string>& args);

// The worker arguments of a generation: `args` without --master-port (and without --resume
// when `resume` is given), then `--master-port PORT` and `--resume RESUME`. Exposed for tests.
std::vector<std::string> generation_arguments(const std::vector<std::string>& args, int port,
                                              const std::string& resume);

}  // namespace alloy::app
