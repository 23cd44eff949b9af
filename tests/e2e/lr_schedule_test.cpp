// `alloy train --lr-schedule/--warmup-steps/--min-lr` end to end: the log reports the schedule
// and each epoch's last rate (the schedule's value at that step count), a run resumed from a
// mid-run checkpoint takes the schedule from it and ends bit-identical to the run that was never
// stopped, and bad values are usage errors naming the flag.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_file.h"
#include "core/ops/lr_schedule.h"
#include "tests/e2e/checkpoint_runs.h"
#include "tests/parallel/forked.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;

namespace {

// 50 steps an epoch (the synthetic set at batch 256), 2 epochs: the decay spans steps 10-100.
const std::vector<std::string> kSchedule = {"--epochs",      "2",      "--lr",           "0.1",
                                            "--lr-schedule", "cosine", "--warmup-steps", "10",
                                            "--min-lr",      "0.001"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lr_schedule_e2e)

BOOST_AUTO_TEST_CASE(the_log_reports_the_schedule_and_each_epochs_last_rate) {
  TempDir dir;
  const TrainRun run = run_logged(dir, "cosine", quick_train_args(kSchedule));
  const auto start = events(run.log, "start");
  BOOST_TEST_REQUIRE(start.size() == 1u);
  BOOST_TEST(json_field(start[0], "lr_schedule") == "cosine");
  BOOST_TEST(json_field(start[0], "warmup_steps") == "10");
  BOOST_TEST(std::stod(json_field(start[0], "min_lr")) == 0.001);

  alloy::LrSchedule schedule;
  schedule.decay = alloy::LrDecay::cosine;
  schedule.base_lr = 0.1f;
  schedule.min_lr = 0.001f;
  schedule.warmup_steps = 10;
  schedule.total_steps = 100;
  const auto epochs = events(run.log, "epoch");
  BOOST_TEST_REQUIRE(epochs.size() == 2u);
  for (int epoch = 1; epoch <= 2; ++epoch) {
    const double logged = std::stod(json_field(epochs[epoch - 1], "lr"));
    const double expected = alloy::scheduled_lr(schedule, 50 * epoch - 1);
    BOOST_TEST(std::fabs(logged - expected) <= 1e-6 * expected,
               "epoch " << epoch << ": lr " << logged << ", expected " << expected);
  }
  BOOST_TEST(run.process.output.find("(cosine to 0.001, 10 warm-up steps)") != std::string::npos,
             run.process.output);

  const TrainRun fixed =
      run_logged(dir, "fixed", quick_train_args({"--epochs", "2", "--lr", "0.1"}));
  BOOST_TEST(json_field(events(fixed.log, "epoch").back(), "lr") == "0.1");
  BOOST_TEST(fixed.digest() != run.digest(), "the schedule changed no update");
}

BOOST_AUTO_TEST_CASE(a_resumed_run_takes_the_schedule_from_its_checkpoint_bit_for_bit) {
  TempDir dir;
  const std::string run_dir = dir.file("run");
  const TrainRun straight = run_logged(dir, "straight", quick_train_args(kSchedule));
  run_logged(dir, "saving",
             quick_train_args(with(kSchedule, {"--checkpoint-dir", run_dir, "--checkpoint-every",
                                               "30", "--keep-checkpoints", "10"})));
  // Step 30 is in the decay, mid-epoch; no schedule flag is given again.
  const TrainRun resumed = run_logged(
      dir, "resumed",
      quick_train_args({"--epochs", "2", "--resume", ckpt::checkpoint_path(run_dir, 30)}));
  BOOST_TEST(json_field(events(resumed.log, "start")[0], "lr_schedule") == "cosine");
  BOOST_TEST(!straight.digest().empty());
  BOOST_TEST(resumed.digest() == straight.digest());
}

// Every rank computes the same schedule from the same step count: two workers on the CPU end
// with equal weights.
BOOST_AUTO_TEST_CASE(data_parallel_ranks_follow_one_schedule) {
  TempDir dir;
  const TrainRun run =
      run_logged(dir, "ddp",
                 quick_train_args(with(kSchedule, {"--gpus", "2", "--batch-size", "128",
                                                   "--master-port", std::to_string(free_port())})));
  const std::string digest = run.digest();
  BOOST_TEST(!digest.empty());
  BOOST_TEST(json_field(events(run.log, "end")[0], "world_size") == "2");
  BOOST_TEST(run.log.find("\"params_digests\":[\"" + digest + "\",\"" + digest + "\"]") !=
                 std::string::npos,
             run.log);
}

BOOST_AUTO_TEST_CASE(bad_values_are_usage_errors_naming_the_flag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--lr-schedule", "exponential"}, "--lr-schedule"},
      {{"--warmup-steps", "-1"}, "--warmup-steps"},
      {{"--lr-schedule", "cosine", "--min-lr", "0.5", "--lr", "0.1"}, "--min-lr"},
      {{"--min-lr", "0.01"}, "--min-lr"},
      {{"--lr-schedule", "linear", "--min-lr", "nan"}, "--min-lr"},
  };
  for (const auto& [flags, named] : cases) {
    const ProcessResult result = run_alloy(quick_train_args(with(flags, {"--epochs", "1"})));
    BOOST_TEST(result.exit_code == 2, flags[0] << ": exit " << result.exit_code);
    BOOST_TEST(result.errors.find(named) != std::string::npos, result.errors);
  }
}

BOOST_AUTO_TEST_SUITE_END()
