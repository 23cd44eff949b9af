// Training that heals itself: a data-parallel job with --max-restarts whose workers are killed
// (SIGKILL) mid-epoch restarts them from the newest checkpoint, writes a restart event per restart,
// and ends with the params_digest of the job that was never interrupted, on every rank; on two
// nodes, a worker killed on node 1 makes both nodes' launchers restart. Workers are found as the
// launchers' children and killed from here, once the JSON log shows the checkpoint of a given step:
// no test hook inside alloy.
#include <signal.h>
#include <sys/types.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <sstream>
#include <thread>

#include "tests/e2e/checkpoint_runs.h"
#include "tests/parallel/forked.h"

using namespace alloy::test;
using Clock = std::chrono::steady_clock;

namespace {

// Two epochs of 100 steps (global batch 128 over two ranks), a checkpoint every 20 steps.
std::vector<std::string> job_args(const std::string& checkpoints, int port,
                                  const std::vector<std::string>& more) {
  std::vector<std::string> args =
      quick_train_args({"--epochs", "2", "--batch-size", "128", "--checkpoint-dir", checkpoints,
                        "--checkpoint-every", "20", "--keep-checkpoints", "10", "--master-port",
                        std::to_string(port)});
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The uninterrupted job's digest, computed once.
const std::string& uninterrupted_digest() {
  static TempDir dir;
  static const std::string digest = [] {
    const TrainRun run =
        run_logged(dir, "straight", job_args(dir.file("run"), free_port(), {"--gpus", "2"}));
    return run.digest();
  }();
  BOOST_TEST_REQUIRE(!digest.empty());
  return digest;
}

// Waits until the log at `path` holds a checkpoint event of `step` after `restarts` restart
// events; false after 60 s.
bool wait_for_checkpoint(const std::string& path, std::size_t restarts, int step) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    const std::string log = read_text(path);
    if (events(log, "restart").size() == restarts) {
      const std::size_t after = log.rfind("\"event\":\"restart\"");
      const std::string tail = restarts == 0 ? log : log.substr(after);
      for (const std::string& line : events(tail, "checkpoint")) {
        if (json_field(line, "step") == std::to_string(step)) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

void check_end(const std::string& log, const std::string& digest) {
  const auto end = events(log, "end");
  BOOST_TEST_REQUIRE(end.size() == 1u, log);
  BOOST_TEST(json_field(end[0], "params_digest") == digest);
  BOOST_TEST(end[0].find("\"params_digests\":[\"" + digest + "\",\"" + digest + "\"]") !=
                 std::string::npos,
             end[0]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(elastic_restart)

BOOST_AUTO_TEST_CASE(workers_killed_twice_mid_epoch_restart_and_end_bit_identical) {
  const std::string& digest = uninterrupted_digest();
  TempDir dir;
  const std::string log = dir.file("job.jsonl");
  int status = -1;
  {
    BackgroundAlloy job(job_args(dir.file("run"), free_port(),
                                 {"--gpus", "2", "--max-restarts", "3", "--log-json", log}),
                        dir.file("out"), dir.file("err"));
    // Rank 1 in the first epoch, then rank 0 (which saves) in the second.
    const std::vector<std::pair<int, int>> kills = {{40, 1}, {120, 0}};
    for (std::size_t i = 0; i < kills.size(); ++i) {
      BOOST_TEST_REQUIRE(wait_for_checkpoint(log, i, kills[i].first), read_text(dir.file("err")));
      const std::vector<pid_t> workers = workers_of(job.pid());
      BOOST_TEST_REQUIRE(workers.size() == 2u);
      BOOST_TEST_MESSAGE("killing rank " << kills[i].second << " after step " << kills[i].first);
      BOOST_TEST_REQUIRE(::kill(workers[static_cast<std::size_t>(kills[i].second)], SIGKILL) == 0);
    }
    status = job.wait();
  }
  const std::string errors = read_text(dir.file("err"));
  BOOST_TEST_MESSAGE(errors);
  BOOST_TEST(status == 0, errors);
  const std::string text = read_text(log);
  const auto restarts = events(text, "restart");
  BOOST_TEST_REQUIRE(restarts.size() == 2u, text);
  for (std::size_t i = 0; i < restarts.size(); ++i) {
    BOOST_TEST(json_field(restarts[i], "generation") == std::to_string(i + 1));
    BOOST_TEST(json_field(restarts[i], "cause").find("was killed by SIGKILL") != std::string::npos,
               restarts[i]);
    BOOST_TEST(!json_field(restarts[i], "checkpoint").empty(), restarts[i]);
  }
  BOOST_TEST(json_field(restarts[0], "cause").find("rank 1 ") != std::string::npos, restarts[0]);
  BOOST_TEST(json_field(restarts[1], "cause").find("rank 0 ") != std::string::npos, restarts[1]);
  check_end(text, digest);
}

BOOST_AUTO_TEST_CASE(a_worker_killed_on_node_1_restarts_both_nodes) {
  const std::string& digest = uninterrupted_digest();
  TempDir dir;
  const std::string checkpoints = dir.file("run");  // shared by the two "nodes"
  const int port = free_port();
  std::vector<std::unique_ptr<BackgroundAlloy>> nodes;
  for (const std::string nr : {"0", "1"}) {
    nodes.push_back(std::make_unique<BackgroundAlloy>(
        job_args(checkpoints, port,
                 {"--nodes", "2", "--gpus", "1", "--nr", nr, "--max-restarts", "2", "--log-json",
                  dir.file("node" + nr + ".jsonl")}),
        dir.file("node" + nr + ".out"), dir.file("node" + nr + ".err")));
  }
  BOOST_TEST_REQUIRE(wait_for_checkpoint(dir.file("node0.jsonl"), 0, 40),
                     read_text(dir.file("node0.err")));
  const std::vector<pid_t> node1_workers = workers_of(nodes[1]->pid());
  BOOST_TEST_REQUIRE(node1_workers.size() == 1u);
  BOOST_TEST_REQUIRE(::kill(node1_workers[0], SIGKILL) == 0);
  for (int nr = 0; nr < 2; ++nr) {
    const int status = nodes[static_cast<std::size_t>(nr)]->wait();
    const std::string errors = read_text(dir.file("node" + std::to_string(nr) + ".err"));
    BOOST_TEST_MESSAGE("node " << nr << ": " << errors);
    BOOST_TEST(status == 0, errors);
    // Both launchers restarted their workers once.
    BOOST_TEST(errors.find("restart 1 of at most 2") != std::string::npos, errors);
  }
  const std::string text = read_text(dir.file("node0.jsonl"));
  const auto restarts = events(text, "restart");
  BOOST_TEST_REQUIRE(restarts.size() == 1u, text);
  BOOST_TEST(json_field(restarts[0], "cause").find("node 1: rank 1 (pid") != std::string::npos,
             restarts[0]);
  check_end(text, digest);
}

BOOST_AUTO_TEST_CASE(max_restarts_needs_a_checkpoint_dir_and_alloys_launcher) {
  const ProcessResult missing = run_alloy(quick_train_args({"--max-restarts", "2"}));
  BOOST_TEST(missing.exit_code == 2);
  BOOST_TEST(missing.errors.find("--max-restarts 2 needs --checkpoint-dir") != std::string::npos,
             missing.errors);
  const ProcessResult resume = run_alloy(quick_train_args({"--resume", "auto"}));
  BOOST_TEST(resume.exit_code == 2);
  BOOST_TEST(resume.errors.find("--resume auto needs --checkpoint-dir") != std::string::npos,
             resume.errors);
}

BOOST_AUTO_TEST_CASE(resume_auto_starts_fresh_then_continues_from_the_newest_checkpoint) {
  TempDir dir;
  const std::string run = dir.file("run");
  const TrainRun fresh =
      run_logged(dir, "fresh",
                 quick_train_args({"--epochs", "1", "--checkpoint-dir", run, "--resume", "auto"}));
  BOOST_TEST(fresh.process.errors.find("no readable checkpoint in " + run + "; starting fresh") !=
                 std::string::npos,
             fresh.process.errors);
  const TrainRun resumed =
      run_logged(dir, "resumed",
                 quick_train_args({"--epochs", "2", "--checkpoint-dir", run, "--resume", "auto"}));
  BOOST_TEST(resumed.process.errors.find("resuming from " + run + "/step-00000050.ckpt") !=
                 std::string::npos,
             resumed.process.errors);
  const TrainRun straight = run_logged(dir, "straight", quick_train_args({"--epochs", "2"}));
  BOOST_TEST(resumed.digest() == straight.digest());
  // An explicit directory without a readable checkpoint stays an error.
  const ProcessResult empty = run_alloy(quick_train_args({"--resume", dir.path()}));
  BOOST_TEST(empty.exit_code == 1);
  BOOST_TEST(empty.errors.find("no checkpoints in " + dir.path()) != std::string::npos,
             empty.errors);
}

BOOST_AUTO_TEST_SUITE_END()
