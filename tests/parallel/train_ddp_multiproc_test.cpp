// `alloy train` as a data-parallel job, end to end through the command line: the launcher
// (--nodes 1 --gpus 2), two nodes on 127.0.0.1 (--nr 0 and --nr 1), the torchrun environment,
// the JSON log of rank 0, and the failures: a killed rank, a busy master port, an unreachable
// master, a global batch that does not divide among the ranks.
#include <signal.h>

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <filesystem>
#include <sstream>
#include <thread>

#include "parallel/socket.h"
#include "tests/parallel/alloy_runs.h"
#include "tests/support/process.h"

using alloy::test::check_agreeing_end_event;
using alloy::test::contains;
using alloy::test::event;
using alloy::test::field;
using alloy::test::ForkedChild;
using alloy::test::free_port;
using alloy::test::run_alloy;
using alloy::test::slurp;
using alloy::test::spawn_alloy;
using alloy::test::TempDir;
using alloy::test::wait_for;
using Clock = std::chrono::steady_clock;

namespace {

// On the CPU, as the tests of the CPU path: with --device auto a machine with GPUs would put
// the ranks on them.
std::vector<std::string> common_args(const std::string& log, int port,
                                     const std::string& epochs = "2") {
  return {"train",      "--device",  "cpu",      "--model",       "mlp",
          "--dataset",  "synthetic", "--epochs", epochs,          "--batch-size",
          "256",        "--threads", "1",        "--master-port", std::to_string(port),
          "--log-json", log};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(train_ddp)

BOOST_AUTO_TEST_CASE(launcher_with_two_workers_trains_like_one_process) {
  const TempDir directory;
  const auto single = run_alloy(common_args(directory.file("single.json"), free_port()));
  BOOST_REQUIRE_MESSAGE(single.exit_code == 0, single.errors);
  auto args = common_args(directory.file("ddp.json"), free_port());
  args.insert(args.end(), {"--nodes", "1", "--gpus", "2"});
  const auto start = Clock::now();
  const auto ddp = run_alloy(args);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  BOOST_REQUIRE_MESSAGE(ddp.exit_code == 0, ddp.errors);
  const std::string log = slurp(directory.file("ddp.json"));
  check_agreeing_end_event(log);
  const double single_acc =
      std::stod(field(event(slurp(directory.file("single.json")), "end"), "test_acc"));
  const double ddp_acc = std::stod(field(event(log, "end"), "test_acc"));
  BOOST_TEST_MESSAGE("test_acc: one process " << single_acc << ", two workers " << ddp_acc << " ("
                                              << seconds << " s)");
  BOOST_TEST(std::abs(single_acc - ddp_acc) <= 0.01);
  // Only rank 0 reports: one set of epoch lines.
  std::size_t epoch_lines = 0;
  for (std::size_t at = 0; (at = ddp.output.find("epoch 1/2", at)) != std::string::npos; ++at)
    ++epoch_lines;
  BOOST_TEST(epoch_lines == 1u, ddp.output);
}

// --clip-grad-norm in a data-parallel job acts on the averaged gradients, inside the amp step
// after DDP's average: every rank clips alike (the same weights), and the epoch's mean norm is
// the one process's over the same global batches (fp32 reduction here), not a rank's own.
BOOST_AUTO_TEST_CASE(clipping_acts_on_the_averaged_gradients_alike_on_every_rank) {
  const TempDir directory;
  auto single_args = common_args(directory.file("single.json"), free_port(), "1");
  single_args.insert(single_args.end(), {"--clip-grad-norm", "0.05", "--allreduce-fp32"});
  const auto single = run_alloy(single_args);
  BOOST_REQUIRE_MESSAGE(single.exit_code == 0, single.errors);
  auto args = common_args(directory.file("ddp.json"), free_port(), "1");
  args.insert(args.end(), {"--gpus", "2", "--clip-grad-norm", "0.05", "--allreduce-fp32"});
  const auto ddp = run_alloy(args);
  BOOST_REQUIRE_MESSAGE(ddp.exit_code == 0, ddp.errors);
  const std::string log = slurp(directory.file("ddp.json"));
  check_agreeing_end_event(log);
  const std::string epoch = event(log, "epoch");
  const std::string single_epoch = event(slurp(directory.file("single.json")), "epoch");
  BOOST_TEST(field(epoch, "clipped_steps") == "50");
  BOOST_TEST(std::stod(field(epoch, "grad_norm")) == std::stod(field(single_epoch, "grad_norm")),
             boost::test_tools::tolerance(1e-4));
}

BOOST_AUTO_TEST_CASE(two_nodes_on_one_machine_train_together) {
  const TempDir directory;
  const int port = free_port();
  std::vector<std::unique_ptr<ForkedChild>> nodes;
  for (const char* nr : {"0", "1"}) {
    auto args = common_args(directory.file(std::string("node") + nr + ".json"), port);
    args.insert(args.end(), {"--nodes", "2", "--gpus", "1", "--nr", nr, "--master-addr",
                             "127.0.0.1", "--allreduce-fp32"});
    nodes.push_back(spawn_alloy(args, {}, directory.file(std::string("node") + nr)));
  }
  for (int nr = 0; nr < 2; ++nr) {
    const auto outcome = wait_for(*nodes[static_cast<std::size_t>(nr)], 120);
    BOOST_TEST(
        outcome.exit_code == 0,
        "node " << nr << ": " << slurp(directory.file("node" + std::to_string(nr) + ".err")));
  }
  check_agreeing_end_event(slurp(directory.file("node0.json")));
  const bool node1_logged = std::filesystem::exists(directory.file("node1.json")) &&
                            !slurp(directory.file("node1.json")).empty();
  BOOST_TEST(!node1_logged, "rank 1 wrote a log too");
}

BOOST_AUTO_TEST_CASE(the_torchrun_environment_launches_the_same_job) {
  const TempDir directory;
  const int port = free_port();
  std::vector<std::unique_ptr<ForkedChild>> ranks;
  for (const char* rank : {"0", "1"}) {
    std::vector<std::string> args{"train",
                                  "--device",
                                  "cpu",
                                  "--model",
                                  "mlp",
                                  "--dataset",
                                  "synthetic",
                                  "--epochs",
                                  "1",
                                  "--batch-size",
                                  "128",
                                  "--threads",
                                  "1",
                                  "--opt-level",
                                  "O2",
                                  "--log-json",
                                  directory.file(std::string("rank") + rank + ".json")};
    ranks.push_back(spawn_alloy(args,
                                {{"MASTER_ADDR", "127.0.0.1"},
                                 {"MASTER_PORT", std::to_string(port)},
                                 {"RANK", rank},
                                 {"WORLD_SIZE", "2"},
                                 {"LOCAL_RANK", "0"}},
                                directory.file(std::string("rank") + rank)));
  }
  for (int rank = 0; rank < 2; ++rank) {
    const auto outcome = wait_for(*ranks[static_cast<std::size_t>(rank)], 120);
    BOOST_TEST(
        outcome.exit_code == 0,
        "rank " << rank << ": " << slurp(directory.file("rank" + std::to_string(rank) + ".err")));
  }
  check_agreeing_end_event(slurp(directory.file("rank0.json")));
}

// Dropout's masks follow an example's row in the global batch, not in a rank's share: two
// ranks draw the masks one process draws, and the epoch's loss agrees to the rounding of the
// averaged gradients. A rank drawing from its own rows would differ by dropout's noise, as
// another seed does.
BOOST_AUTO_TEST_CASE(two_ranks_draw_the_dropout_masks_of_one_process) {
  const TempDir directory;
  const auto args = [&](const std::string& log, const std::string& seed) {
    auto all = common_args(log, free_port(), "1");
    std::replace(all.begin(), all.end(), std::string("mlp"), std::string("ffn"));
    // 2560 examples, 10 steps: ffn's steps are the slow part of this test.
    all.insert(all.end(), {"--synthetic-size", "2560", "--lr", "0.05", "--seed", seed});
    return all;
  };
  const auto epoch_loss = [&](const std::string& name) {
    return std::stod(field(event(slurp(directory.file(name)), "epoch"), "train_loss"));
  };
  for (const std::string name : {"single.json", "seed.json"}) {
    const auto single = run_alloy(args(directory.file(name), name == "seed.json" ? "2" : "1"));
    BOOST_REQUIRE_MESSAGE(single.exit_code == 0, single.errors);
  }
  auto ddp_args = args(directory.file("ddp.json"), "1");
  ddp_args.insert(ddp_args.end(), {"--gpus", "2"});
  const auto ddp = run_alloy(ddp_args);
  BOOST_REQUIRE_MESSAGE(ddp.exit_code == 0, ddp.errors);
  check_agreeing_end_event(slurp(directory.file("ddp.json")));
  const double single = epoch_loss("single.json");
  BOOST_TEST_MESSAGE("ffn epoch loss: one process " << single << ", two ranks "
                                                    << epoch_loss("ddp.json") << ", seed 2 "
                                                    << epoch_loss("seed.json"));
  BOOST_TEST(std::abs(epoch_loss("ddp.json") - single) <= 1e-4 * single);
  BOOST_TEST(std::abs(epoch_loss("seed.json") - single) > 1e-3 * single);
}

// A world of one rank joins a process group when --dist-backend names one (DDP at world size
// 1, as torchrun --nproc-per-node 1 runs it), and then ends bit for bit where one process does;
// without --dist-backend the same environment is a plain single process.
BOOST_AUTO_TEST_CASE(ddp_at_world_size_one_is_the_single_process_bit_for_bit) {
  const TempDir directory;
  for (const std::string level : {"O0", "O2"}) {
    BOOST_TEST_CONTEXT(level) {
      const auto args = [&](const std::string& log) {
        auto all = common_args(log, free_port(), "1");
        all.insert(all.end(), {"--opt-level", level});
        return all;
      };
      const std::vector<std::pair<std::string, std::string>> torchrun{
          {"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}};
      const std::string single_log = directory.file("single" + level + ".json");
      const std::string single = alloy::test::train_to_end(args(single_log), single_log, torchrun);
      BOOST_TEST(field(event(single, "start"), "dist_backend").empty(), single);
      BOOST_TEST(field(event(single, "end"), "params_digests").empty(), single);

      const std::string group_log = directory.file("group" + level + ".json");
      auto group_args = args(group_log);
      group_args.insert(group_args.end(), {"--dist-backend", "gloo"});
      const std::string group = alloy::test::train_to_end(group_args, group_log, torchrun);
      BOOST_TEST(field(event(group, "start"), "dist_backend") == "\"gloo\"");
      BOOST_TEST(field(event(group, "end"), "world_size") == "1");
      const std::string digest = field(event(single, "end"), "params_digest");
      BOOST_TEST(digest.size() == 18u);
      BOOST_TEST(field(event(group, "end"), "params_digests") == "[" + digest + "]");
    }
  }
}

BOOST_AUTO_TEST_CASE(killing_a_rank_makes_the_other_fail_naming_it_within_60_s) {
  const TempDir directory;
  const int port = free_port();
  std::vector<std::unique_ptr<ForkedChild>> nodes;
  for (const char* nr : {"0", "1"}) {
    auto args = common_args(directory.file(std::string("node") + nr + ".json"), port, "1000");
    args.insert(args.end(), {"--nodes", "2", "--gpus", "1", "--nr", nr});
    nodes.push_back(spawn_alloy(args, {}, directory.file(std::string("node") + nr)));
  }
  // Wait until they train (rank 0 logged its start), then kill rank 1 without warning.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (event(slurp(directory.file("node0.json")), "start").empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  BOOST_REQUIRE(::kill(nodes[1]->pid(), SIGKILL) == 0);
  const auto killed = Clock::now();
  const auto outcome = wait_for(*nodes[0], 70);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  const std::string errors = slurp(directory.file("node0.err"));
  BOOST_TEST_MESSAGE("rank 0 exited with " << outcome.exit_code << " " << seconds
                                           << " s after rank 1 was killed: " << errors);
  BOOST_TEST(outcome.exit_code == 1);
  BOOST_TEST(seconds < 60.0);
  BOOST_TEST(contains(errors, "rank 1 was lost"), errors);
  wait_for(*nodes[1], 5);
}

BOOST_AUTO_TEST_CASE(a_killed_worker_stops_the_launcher_with_an_error_naming_it) {
  const TempDir directory;
  auto args = common_args(directory.file("ddp.json"), free_port(), "1000");
  args.insert(args.end(), {"--nodes", "1", "--gpus", "2"});
  auto launcher = spawn_alloy(args, {}, directory.file("launcher"));
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (event(slurp(directory.file("ddp.json")), "start").empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The launcher's children, in start order: the workers of ranks 0 and 1.
  const std::string pid = std::to_string(launcher->pid());
  std::istringstream children(slurp("/proc/" + pid + "/task/" + pid + "/children"));
  pid_t rank0 = 0;
  pid_t rank1 = 0;
  children >> rank0 >> rank1;
  BOOST_REQUIRE_MESSAGE(rank1 > 0, "no second worker");
  BOOST_REQUIRE(::kill(rank1, SIGKILL) == 0);
  const auto killed = Clock::now();
  const auto outcome = wait_for(*launcher, 70);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  const std::string errors = slurp(directory.file("launcher.err"));
  BOOST_TEST_MESSAGE("the launcher exited with " << outcome.exit_code << " " << seconds
                                                 << " s after rank 1 was killed: " << errors);
  BOOST_TEST(outcome.exit_code == 1);
  BOOST_TEST(seconds < 60.0);
  BOOST_TEST(contains(errors, "rank 1 (pid " + std::to_string(rank1) + ") was killed by SIGKILL"),
             errors);
  BOOST_TEST(::kill(rank0, 0) != 0, "the worker of rank 0 outlived the launcher");
}

BOOST_AUTO_TEST_CASE(a_busy_master_port_or_an_unreachable_master_is_a_clear_error) {
  const TempDir directory;
  const alloy::parallel::UniqueFd taken = alloy::parallel::listen_tcp("127.0.0.1", 0);
  const int busy = alloy::parallel::local_port(taken);
  auto args = common_args(directory.file("a.json"), busy);
  args.insert(args.end(), {"--nodes", "2", "--gpus", "1", "--nr", "0"});
  const auto master = run_alloy(args);
  BOOST_TEST(master.exit_code == 1);
  BOOST_TEST(contains(master.errors, "cannot listen on 127.0.0.1:" + std::to_string(busy) +
                                         ": address already in use"),
             master.errors);

  const int nobody = free_port();
  args = common_args(directory.file("b.json"), nobody);
  args.insert(args.end(), {"--nodes", "2", "--gpus", "1", "--nr", "1"});
  auto worker = spawn_alloy(args, {{"ALLOY_COLLECTIVE_TIMEOUT", "2"}}, directory.file("b"));
  const auto outcome = wait_for(*worker, 30);
  const std::string errors = slurp(directory.file("b.err"));
  BOOST_TEST(outcome.exit_code == 1);
  BOOST_TEST(contains(errors, "cannot reach the master at 127.0.0.1:" + std::to_string(nobody)),
             errors);
}

// --zero 1 over two ranks: each rank keeps half of the fp32 masters and of AdamW's moments,
// gradients are reduced to their owners and the weights all-gathered. Two ranks add their
// gradients in the one order a + b = b + a, the update is elementwise, so the run ends with
// plain DDP's weights bit for bit, and every rank with the same digest.
BOOST_AUTO_TEST_CASE(zero_1_over_two_ranks_ends_with_the_weights_of_ddp) {
  const TempDir directory;
  std::string digests[2];
  for (const int zero : {0, 1}) {
    const std::string log = directory.file("zero" + std::to_string(zero) + ".json");
    auto args = common_args(log, free_port(), "1");
    args.insert(args.end(), {"--gpus", "2", "--opt-level", "O2", "--optimizer", "adamw", "--lr",
                             "0.001", "--zero", std::to_string(zero)});
    const auto result = run_alloy(args);
    BOOST_REQUIRE_MESSAGE(result.exit_code == 0, result.errors);
    check_agreeing_end_event(slurp(log));
    digests[zero] = field(event(slurp(log), "end"), "params_digest");
  }
  BOOST_TEST(digests[0] == digests[1]);
}

BOOST_AUTO_TEST_CASE(zero_flags_that_cannot_work_are_usage_errors_naming_them) {
  const TempDir directory;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--zero", "2"}, "--zero must be 0 (plain data parallelism) or 1"},
      {{"--zero", "1", "--ema-decay", "0.9"}, "--zero 1 with --ema-decay"},
      {{"--zero", "1", "--clip-grad-norm", "1"}, "--zero 1 with --clip-grad-norm"},
  };
  for (const auto& [flags, message] : cases) {
    auto args = common_args(directory.file("log.json"), free_port());
    args.insert(args.end(), {"--gpus", "2"});
    args.insert(args.end(), flags.begin(), flags.end());
    const auto result = run_alloy(args);
    BOOST_TEST(result.exit_code == 2, message);
    BOOST_TEST(contains(result.errors, message), result.errors);
  }
}

BOOST_AUTO_TEST_CASE(a_global_batch_that_does_not_divide_is_a_usage_error) {
  const TempDir directory;
  auto args = common_args(directory.file("log.json"), free_port());
  args.insert(args.end(), {"--gpus", "3"});
  const auto result = run_alloy(args);
  BOOST_TEST(result.exit_code == 2);
  BOOST_TEST(contains(result.errors,
                      "--batch-size 256 is the global batch and must divide "
                      "evenly among the 3 ranks"),
             result.errors);
}

// Rank 0 saves the checkpoints of a data-parallel job with its world size; one saved at an
// epoch's end resumes at another world size, one saved mid-epoch (whose sampler position is a
// rank's) only at its own, and otherwise says why.
BOOST_AUTO_TEST_CASE(checkpoints_of_two_ranks_resume_at_another_world_size_from_an_epoch_end) {
  const TempDir directory;
  const std::string checkpoints = directory.file("checkpoints");
  auto args = common_args(directory.file("ddp.json"), free_port(), "1");
  args.insert(args.end(), {"--gpus", "2", "--checkpoint-dir", checkpoints, "--checkpoint-every",
                           "20", "--keep-checkpoints", "5"});
  const auto ddp = run_alloy(args);
  BOOST_REQUIRE_MESSAGE(ddp.exit_code == 0, ddp.errors);
  const auto info = run_alloy({"ckpt", "info", checkpoints + "/step-00000050.ckpt", "--json"});
  BOOST_TEST(contains(info.output, "\"world_size\":2"), info.output);

  auto resumed = common_args(directory.file("single.json"), free_port());
  resumed.insert(resumed.end(), {"--resume", checkpoints + "/step-00000050.ckpt"});
  const auto single = run_alloy(resumed);
  BOOST_TEST(single.exit_code == 0, single.errors);
  BOOST_TEST(field(event(slurp(directory.file("single.json")), "end"), "step") == "100");

  resumed = common_args(directory.file("mid.json"), free_port());
  resumed.insert(resumed.end(), {"--resume", checkpoints + "/step-00000040.ckpt"});
  const auto mid = run_alloy(resumed);
  BOOST_TEST(mid.exit_code == 1);
  BOOST_TEST(contains(mid.errors,
                      "was saved mid-epoch (step 40 of its epoch) by a job of 2 "
                      "rank(s) and can resume only with 2; this job has 1"),
             mid.errors);
}

BOOST_AUTO_TEST_SUITE_END()
