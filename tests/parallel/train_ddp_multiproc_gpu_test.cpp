// `alloy train` as a data-parallel job on one GPU (labels gpu and multiproc; skipped, exit 77,
// saying why, without a usable CUDA device):
//  - DDP at world size 1 over NCCL (the torchrun environment RANK=0 WORLD_SIZE=1 with
//    --dist-backend nccl, which joins a group of one) ends with the single process's
//    params_digest, bit for bit;
//  - two processes sharing cuda:0 over Gloo (--device cuda:0 --dist-backend gloo --gpus 2) end
//    with the same digest on both ranks and within 0.015 of one process's test accuracy after
//    the 10 epochs of the LeNet recipe, at O0 and O2;
//  - over Gloo the step stays eager under --cuda-graph auto, saying why, and on is a usage
//    error;
//  - a rank killed mid-training makes the other exit non-zero within 60 s, naming it.
// Two GPUs and NCCL between them: train_nccl_multiproc_gpu_test.cpp.
#include <signal.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "tests/parallel/alloy_runs.h"
#include "tests/support/gpu.h"
#include "tests/support/process.h"

using namespace alloy::test;
using Clock = std::chrono::steady_clock;

BOOST_AUTO_TEST_SUITE(train_ddp_gpu)

BOOST_AUTO_TEST_CASE(ddp_at_world_size_one_over_nccl_is_the_single_process_bit_for_bit) {
  const TempDir directory;
  for (const std::string level : {"O0", "O2"}) {
    BOOST_TEST_CONTEXT(level) {
      const std::string single_log = directory.file("single" + level + ".json");
      const std::string single = train_to_end(
          with(lenet_recipe(level, "1", single_log), {"--device", "cuda"}), single_log);
      const std::string group_log = directory.file("group" + level + ".json");
      const std::string group = train_to_end(
          with(lenet_recipe(level, "1", group_log), {"--device", "cuda", "--dist-backend", "nccl"}),
          group_log,
          {{"RANK", "0"},
           {"WORLD_SIZE", "1"},
           {"LOCAL_RANK", "0"},
           {"MASTER_ADDR", "127.0.0.1"},
           {"MASTER_PORT", std::to_string(free_port())}});
      // It did join a group of one: the log says so.
      BOOST_TEST(field(event(group, "start"), "dist_backend") == "\"nccl\"");
      BOOST_TEST(field(event(group, "start"), "device") == "\"cuda:0\"");
      BOOST_TEST(field(event(group, "end"), "world_size") == "1");
      const std::string expected = field(event(single, "end"), "params_digest");
      BOOST_TEST(expected.size() == 18u, single);
      BOOST_TEST(field(event(group, "end"), "params_digests") == "[" + expected + "]");
      if (field(event(group, "end"), "params_digest") != expected) {
        // Tell a DDP difference from a GPU run that does not repeat itself.
        const std::string again_log = directory.file("again" + level + ".json");
        const std::string again = train_to_end(
            with(lenet_recipe(level, "1", again_log), {"--device", "cuda"}), again_log);
        BOOST_ERROR("world size 1 over NCCL ended with "
                    << field(event(group, "end"), "params_digest") << ", one process with "
                    << expected << "; a second single-process run ended with "
                    << field(event(again, "end"), "params_digest"));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(two_ranks_sharing_one_gpu_over_gloo_train_like_one_process) {
  const TempDir directory;
  for (const std::string level : {"O0", "O2"}) {
    BOOST_TEST_CONTEXT(level) {
      const std::string single_log = directory.file("single" + level + ".json");
      const auto started = Clock::now();
      const std::string single = train_to_end(
          with(lenet_recipe(level, "10", single_log), {"--device", "cuda:0"}), single_log);
      const double single_seconds = std::chrono::duration<double>(Clock::now() - started).count();
      const std::string shared_log = directory.file("shared" + level + ".json");
      const std::string shared =
          train_to_end(with(lenet_recipe(level, "10", shared_log),
                            {"--device", "cuda:0", "--dist-backend", "gloo", "--gpus", "2",
                             "--master-port", std::to_string(free_port())}),
                       shared_log);
      const double shared_seconds =
          std::chrono::duration<double>(Clock::now() - started).count() - single_seconds;
      check_agreeing_end_event(shared);
      BOOST_TEST(field(event(shared, "start"), "dist_backend") == "\"gloo\"");
      BOOST_TEST(field(event(shared, "start"), "device") == "\"cuda:0\"");
      BOOST_TEST_MESSAGE(level << " test_acc: one process " << end_test_acc(single) << " ("
                               << single_seconds << " s), two ranks on cuda:0 "
                               << end_test_acc(shared) << " (" << shared_seconds << " s)");
      BOOST_TEST(std::abs(end_test_acc(single) - end_test_acc(shared)) <= 0.015);
    }
  }
}

// Gloo's buckets go through host memory: --cuda-graph auto keeps the step eager and says why
// (stderr and the start event); on is a usage error naming Gloo.
BOOST_AUTO_TEST_CASE(over_gloo_the_step_stays_eager_and_says_why) {
  const TempDir directory;
  const std::string log = directory.file("gloo.json");
  const std::vector<std::string> args{"train",
                                      "--model",
                                      "mlp",
                                      "--dataset",
                                      "synthetic",
                                      "--epochs",
                                      "1",
                                      "--steps",
                                      "5",
                                      "--batch-size",
                                      "64",
                                      "--threads",
                                      "1",
                                      "--device",
                                      "cuda:0",
                                      "--dist-backend",
                                      "gloo",
                                      "--gpus",
                                      "2",
                                      "--master-port",
                                      std::to_string(free_port()),
                                      "--log-json",
                                      log};
  const std::string eager = train_to_end(args, log);
  check_agreeing_end_event(eager);
  BOOST_TEST(field(event(eager, "start"), "cuda_graph") == "false");
  BOOST_TEST(contains(field(event(eager, "start"), "cuda_graph_reason"), "over Gloo"));
  BOOST_TEST(contains(slurp(log + ".out") + slurp(log + ".err"), "cuda graph: eager steps"));
  const ProcessResult on = run_alloy(with(args, {"--cuda-graph", "on"}));
  BOOST_TEST(on.exit_code == 2);
  BOOST_TEST(contains(on.errors, "over Gloo (2 ranks)"), on.errors);
}

BOOST_AUTO_TEST_CASE(a_killed_rank_on_the_gpu_makes_the_other_fail_naming_it_within_60_s) {
  const TempDir directory;
  const int port = free_port();
  std::vector<std::unique_ptr<ForkedChild>> nodes;
  for (const std::string nr : {"0", "1"}) {
    const std::string log = directory.file("node" + nr + ".json");
    nodes.push_back(
        spawn_alloy(with(lenet_recipe("O2", "1000", log),
                         {"--device", "cuda:0", "--dist-backend", "gloo", "--nodes", "2", "--gpus",
                          "1", "--nr", nr, "--master-port", std::to_string(port)}),
                    {}, directory.file("node" + nr)));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (event(slurp(directory.file("node0.json")), "start").empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  BOOST_REQUIRE_MESSAGE(!event(slurp(directory.file("node0.json")), "start").empty(),
                        "rank 0 never started: " << slurp(directory.file("node0.err")));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  BOOST_REQUIRE(::kill(nodes[1]->pid(), SIGKILL) == 0);
  const auto killed = Clock::now();
  const ChildOutcome outcome = wait_for(*nodes[0], 70);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  const std::string errors = slurp(directory.file("node0.err"));
  BOOST_TEST_MESSAGE("rank 0 exited with " << outcome.exit_code << " " << seconds
                                           << " s after rank 1 was killed: " << errors);
  BOOST_TEST(outcome.exit_code != 0);
  BOOST_TEST(outcome.exit_code != -1, "rank 0 hung");
  BOOST_TEST(seconds < 60.0);
  BOOST_TEST(contains(errors, "rank 1 was lost"), errors);
  wait_for(*nodes[1], 5);
}

BOOST_AUTO_TEST_SUITE_END()
