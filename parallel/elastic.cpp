#include "parallel/elastic.h"

#include <sstream>

#include "core/error.h"
#include "parallel/socket.h"
#include "parallel/tcp_store.h"

namespace alloy::parallel {

namespace {

using Outcome = NodeReport::Outcome;

const char* outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::succeeded:
      return "succeeded";
    case Outcome::failed:
      return "failed";
    case Outcome::stopped:
      return "stopped";
    case Outcome::interrupted:
      return "interrupted";
  }
  return "failed";
}

Outcome parse_outcome(const std::string& name) {
  for (const Outcome outcome :
       {Outcome::succeeded, Outcome::failed, Outcome::stopped, Outcome::interrupted}) {
    if (name == outcome_name(outcome)) return outcome;
  }
  fail("elastic store: unknown node outcome '", name, "'");
}

// "OUTCOME SIGNAL USAGE\nCAUSE": the cause last, as it may hold any character.
std::string encode(const NodeReport& report) {
  return detail::concat(outcome_name(report.outcome), ' ', report.killed_by_signal ? 1 : 0, ' ',
                        report.usage_error ? 1 : 0, '\n', report.cause);
}

NodeReport decode(int node, const std::string& text) {
  const auto newline = text.find('\n');
  if (newline == std::string::npos) fail("elastic store: malformed report of node ", node);
  std::istringstream head(text.substr(0, newline));
  std::string outcome;
  int signal = 0;
  int usage = 0;
  if (!(head >> outcome >> signal >> usage)) {
    fail("elastic store: malformed report of node ", node);
  }
  NodeReport report;
  report.node = node;
  report.outcome = parse_outcome(outcome);
  report.killed_by_signal = signal != 0;
  report.usage_error = usage != 0;
  report.cause = text.substr(newline + 1);
  return report;
}

std::vector<char> bytes(const std::string& text) {
  return std::vector<char>(text.begin(), text.end());
}

// A port on `host` that nothing listens on now. The worker of rank 0 binds it a moment later;
// a port taken in between fails that generation, which is then restarted like any failure.
int free_port_on(const std::string& host) {
  const UniqueFd probe = listen_tcp(host, 0);
  return local_port(probe);
}

}  // namespace

GenerationVerdict judge_generation(const std::vector<NodeReport>& reports) {
  GenerationVerdict verdict;
  const NodeReport* cause = nullptr;
  for (const NodeReport& report : reports) {
    if (report.outcome == Outcome::interrupted) {
      verdict.action = GenerationVerdict::Action::give_up;
      verdict.cause = "node " + std::to_string(report.node) + ": " + report.cause;
      return verdict;
    }
    if (report.outcome != Outcome::failed) continue;
    if (cause == nullptr || (report.killed_by_signal && !cause->killed_by_signal)) cause = &report;
  }
  if (cause == nullptr) {
    bool all_succeeded = true;
    for (const NodeReport& report : reports)
      all_succeeded = all_succeeded && report.outcome == Outcome::succeeded;
    if (all_succeeded) return verdict;
    verdict.action = GenerationVerdict::Action::restart;
    verdict.cause = "workers were stopped without a failure being reported";
    return verdict;
  }
  verdict.cause = reports.size() > 1 ? "node " + std::to_string(cause->node) + ": " + cause->cause
                                     : cause->cause;
  verdict.usage_error = cause->usage_error;
  verdict.action =
      cause->usage_error ? GenerationVerdict::Action::give_up : GenerationVerdict::Action::restart;
  return verdict;
}

ElasticAgent::ElasticAgent(const std::string& master_addr, int master_port, int nodes, int node,
                           std::chrono::milliseconds timeout)
    : master_addr_(master_addr), nodes_(nodes), node_(node), timeout_(timeout) {
  ALLOY_CHECK(nodes >= 1 && node >= 0 && node < nodes, "elastic agent: node ", node,
              " does not exist in a job of ", nodes, " nodes");
  try {
    if (node == 0) server_ = std::make_unique<TcpStoreServer>(master_addr, master_port);
    store_ = std::make_unique<TcpStore>(master_addr, master_port, timeout);
  } catch (const Error& error) {
    fail("the launcher of node ", node, " (--max-restarts): ", error.what());
  }
}

ElasticAgent::~ElasticAgent() = default;

std::string ElasticAgent::key(int generation, const std::string& name) const {
  return "alloy/elastic/" + std::to_string(generation) + "/" + name;
}

void ElasticAgent::set(const std::string& key, const std::string& value) {
  try {
    store_->set(key, bytes(value));
  } catch (const Error& error) {
    fail("the launcher of node ", node_, " lost the launchers' store: ", error.what());
  }
}

std::string ElasticAgent::get(const std::string& key, const std::string& what) {
  std::optional<std::vector<char>> value;
  try {
    value = store_->try_get(key, timeout_);
  } catch (const Error& error) {
    fail("the launcher of node ", node_, " lost the launchers' store: ", error.what());
  }
  if (!value) {
    fail("the launcher of node ", node_, " waited ", seconds_str(timeout_), " for ", what,
         " in the launchers' store at ", store_->endpoint());
  }
  return std::string(value->begin(), value->end());
}

GenerationPlan ElasticAgent::begin(int generation, const std::string& resume,
                                   const std::string& cause) {
  GenerationPlan plan;
  plan.generation = generation;
  if (coordinator()) {
    plan.worker_port = free_port_on(master_addr_);
    plan.resume = resume;
    plan.cause = cause;
    set(key(generation, "resume"), resume);
    set(key(generation, "cause"), cause);
    set(key(generation, "port"), std::to_string(plan.worker_port));  // last: the plan is whole
    return plan;
  }
  const std::string what = "generation " + std::to_string(generation) + " from node 0";
  const std::string port = get(key(generation, "port"), what);
  try {
    plan.worker_port = std::stoi(port);
  } catch (const std::exception&) {
    fail("elastic store: generation ", generation, " has a malformed port '", port, "'");
  }
  plan.resume = get(key(generation, "resume"), what);
  plan.cause = get(key(generation, "cause"), what);
  return plan;
}

bool ElasticAgent::peer_failed(int generation) {
  try {
    return store_->try_get(key(generation, "failed"), std::chrono::milliseconds(0)).has_value();
  } catch (const Error& error) {
    fail("the launcher of node ", node_, " lost the launchers' store: ", error.what());
  }
}

std::vector<NodeReport> ElasticAgent::finish(int generation, const NodeReport& mine) {
  if (mine.outcome == Outcome::failed || mine.outcome == Outcome::interrupted) {
    set(key(generation, "failed"), std::to_string(node_));  // stops the other nodes' workers
  }
  set(key(generation, "node/" + std::to_string(node_)), encode(mine));
  std::vector<NodeReport> reports;
  for (int node = 0; node < nodes_; ++node) {
    const std::string text = get(key(generation, "node/" + std::to_string(node)),
                                 "the report of node " + std::to_string(node) + " on generation " +
                                     std::to_string(generation));
    reports.push_back(decode(node, text));
  }
  // Node 0 serves the store: it leaves only once every node has read the reports.
  set(key(generation, "read/" + std::to_string(node_)), "1");
  if (coordinator()) {
    std::vector<std::string> keys;
    for (int node = 0; node < nodes_; ++node)
      keys.push_back(key(generation, "read/" + std::to_string(node)));
    try {
      store_->missing_after(keys, timeout_);
    } catch (const Error& error) {
      fail("the launcher of node 0 lost its own store: ", error.what());
    }
  }
  return reports;
}

}  // namespace alloy::parallel
