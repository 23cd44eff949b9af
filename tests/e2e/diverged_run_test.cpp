// A run whose loss scale collapses: with --max-consecutive-skips N, N overflowing steps in a row at
// any scale stop training with exit 1 and the "training diverged" message; with --checkpoint-dir
// the message names the last checkpoint saved before the overflows began, which is still there and
// verifies; 0 turns the rule off.
#include <boost/test/unit_test.hpp>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

namespace {

// O2 with a first scale of 1e30: every step overflows until the scale has halved ~85 times.
std::vector<std::string> overflowing(const std::vector<std::string>& more) {
  std::vector<std::string> args = {"--opt-level",      "O2",   "--init-loss-scale", "1e30",
                                   "--max-loss-scale", "1e30", "--epochs",          "1"};
  args.insert(args.end(), more.begin(), more.end());
  return quick_train_args(args);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(diverged_run)

BOOST_AUTO_TEST_CASE(overflowing_steps_in_a_row_at_any_scale_stop_the_run) {
  TempDir dir;
  const TrainRun run =
      run_logged(dir, "skips", overflowing({"--max-consecutive-skips", "10"}), /*expected=*/1);
  const std::string& errors = run.process.errors;
  BOOST_TEST(
      errors.find("alloy: error: training diverged: the last 10 steps all overflowed "
                  "(--max-consecutive-skips 10; loss scale now 9.76563e+26)") != std::string::npos,
      errors);
  BOOST_TEST(events(run.log, "end").empty());
}

// Two data-parallel ranks read each poll at the same step (apps/train/overflow_monitor.h), so both
// stop with the divergence and neither first finds its peer gone from a collective.
BOOST_AUTO_TEST_CASE(data_parallel_ranks_stop_together) {
  TempDir dir;
  const TrainRun run =
      run_logged(dir, "ddp", overflowing({"--gpus", "2", "--max-consecutive-skips", "10"}),
                 /*expected=*/1);
  const std::string& errors = run.process.errors;
  BOOST_TEST(
      errors.find("training diverged: the last 10 steps all overflowed") != std::string::npos,
      errors);
  BOOST_TEST(errors.find("was lost") == std::string::npos, errors);
  BOOST_TEST(events(run.log, "end").empty());
}

BOOST_AUTO_TEST_CASE(zero_never_stops) {
  TempDir dir;
  const TrainRun run = run_logged(dir, "off", overflowing({"--max-consecutive-skips", "0"}));
  const auto epochs = events(run.log, "epoch");
  BOOST_TEST_REQUIRE(epochs.size() == 1u);
  BOOST_TEST(json_field(epochs[0], "skipped_steps") == "50");  // every step overflowed
}

BOOST_AUTO_TEST_CASE(the_message_names_the_last_checkpoint_before_the_overflows) {
  TempDir dir;
  const std::string run_dir = dir.file("run");
  run_logged(dir, "good",
             quick_train_args({"--opt-level", "O2", "--epochs", "1", "--checkpoint-dir", run_dir}));
  // Resumed with a learning rate that blows the weights up after a step or two.
  const TrainRun bad =
      run_logged(dir, "bad",
                 quick_train_args({"--opt-level", "O2", "--epochs", "2", "--lr", "1000",
                                   "--max-consecutive-skips", "10", "--checkpoint-dir", run_dir,
                                   "--checkpoint-every", "5", "--keep-checkpoints", "20",
                                   "--resume", run_dir}),
                 /*expected=*/1);
  const std::string& errors = bad.process.errors;
  BOOST_TEST(errors.find("training diverged: the last ") != std::string::npos, errors);
  const std::string marker = "; the last checkpoint before the overflows began is ";
  const std::size_t at = errors.find(marker);
  BOOST_TEST_REQUIRE(at != std::string::npos, errors);
  const std::size_t begin = at + marker.size();
  const std::string good = errors.substr(begin, errors.find(':', begin) - begin);
  BOOST_TEST(good.rfind(run_dir + "/step-", 0) == 0u, good);
  BOOST_TEST(errors.find(": continue from it with --resume " + good) != std::string::npos, errors);
  BOOST_TEST(!events(bad.log, "checkpoint").empty());  // saves went on during the streak
  const ProcessResult verify = run_alloy({"ckpt", "verify", good});
  BOOST_TEST(verify.exit_code == 0, verify.errors);
}

BOOST_AUTO_TEST_CASE(a_negative_count_is_a_usage_error) {
  const ProcessResult result = run_alloy(quick_train_args({"--max-consecutive-skips", "-1"}));
  BOOST_TEST(result.exit_code == 2);
  BOOST_TEST(
      result.errors.find("--max-consecutive-skips must be at least 0, got -1") != std::string::npos,
      result.errors);
}

BOOST_AUTO_TEST_SUITE_END()
