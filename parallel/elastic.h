// Restarts across nodes (--max-restarts, as torchrun's elastic agent): the launchers of a job
// (its agents, one per node) meet in a store that node 0's launcher serves on the master
// address and port. Each round of workers is a generation: node 0's agent publishes the
// generation's plan (a fresh port for the workers' own rendezvous, the checkpoint they resume
// from, why the generation was started); every agent starts its workers with it, watches the
// store for another node's failure while they run, reports how its workers ended, and reads
// every node's report, so that all agents decide alike to finish, restart or give up.
//
// Workers of generation g meet on generation g's port and compare generations once they have
// joined (apps/train/elastic.h), so a stale worker of an older generation cannot join a newer one.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace alloy::parallel {

class TcpStore;
class TcpStoreServer;

struct GenerationPlan {
  int generation = 0;
  int worker_port = 0;  // where this generation's rank 0 serves the workers' rendezvous
  std::string resume;   // the checkpoint to resume from; empty: as the job was started
  std::string cause;    // why this generation was started; empty for generation 0
};

// How one node's workers of a generation ended.
struct NodeReport {
  enum class Outcome { succeeded, failed, stopped, interrupted };
  int node = 0;
  Outcome outcome = Outcome::succeeded;
  bool killed_by_signal = false;  // the first worker to fail died of a signal
  bool usage_error = false;       // the first worker to fail exited with status 2
  std::string cause;              // the launcher's message ("rank 1 (pid 42) was killed by ...")
};

// What the agents make of a generation's reports (the same on every node).
struct GenerationVerdict {
  enum class Action { finish, restart, give_up };
  Action action = Action::finish;
  std::string cause;         // of the failure: the first that is not a consequence of another
  bool usage_error = false;  // give up with status 2
};

// Every node succeeded: finish. A node interrupted (SIGINT/SIGTERM) or a worker's usage error:
// give up. Otherwise restart; the cause is a failed node's, preferring a worker that died of a
// signal (the others usually fail because it went), then the lowest node.
GenerationVerdict judge_generation(const std::vector<NodeReport>& reports);

class ElasticAgent {
 public:
  // Node 0 serves the store on master_addr:master_port; every node connects to it (retrying
  // until `timeout`). `timeout` also bounds each wait for another node between generations.
  ElasticAgent(const std::string& master_addr, int master_port, int nodes, int node,
               std::chrono::milliseconds timeout);
  ~ElasticAgent();
  ElasticAgent(const ElasticAgent&) = delete;
  ElasticAgent& operator=(const ElasticAgent&) = delete;

  int node() const { return node_; }
  bool coordinator() const { return node_ == 0; }

  // Node 0 publishes generation `generation` with a free port on the master address and the
  // given resume and cause; the other nodes wait for the plan and ignore those arguments.
  GenerationPlan begin(int generation, const std::string& resume, const std::string& cause);
  // Whether another node has reported a failure of `generation` (no wait).
  bool peer_failed(int generation);
  // Publishes this node's report of `generation` and returns every node's, by node, once all
  // are in (node 0, which serves the store, also waits until every node has read them). Throws
  // naming the node that did not report within the timeout.
  std::vector<NodeReport> finish(int generation, const NodeReport& mine);

 private:
  std::string key(int generation, const std::string& name) const;
  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key, const std::string& what);

  std::string master_addr_;
  int nodes_;
  int node_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<TcpStoreServer> server_;  // node 0 only
  std::unique_ptr<TcpStore> store_;
};

}  // namespace alloy::parallel
