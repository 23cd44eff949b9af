// `alloy train --label-smoothing X` end to end on short MLP runs over the synthetic set: the
// start event names it; the training loss is the smoothed one, above the plain run's (its
// minimum is the entropy of the smoothed target, not 0) and the weights differ; a checkpoint
// carries it, so a resume without the flag ends with the straight run's bits; bad values are
// usage errors naming the flag. (The op against a float64 reference and PyTorch's formula:
// tests/core/ops/softmax_cross_entropy_test.cpp.)
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(label_smoothing_e2e)

BOOST_AUTO_TEST_CASE(the_loss_is_smoothed_and_a_resume_keeps_it) {
  const TempDir dir;
  const std::string checkpoints = dir.file("run");
  const TrainRun smoothed =
      run_quick(dir, "smoothed", {"--epochs", "2", "--label-smoothing", "0.2"});
  const TrainRun plain = run_quick(dir, "plain", {"--epochs", "2"});
  BOOST_TEST(last_field(smoothed, "start", "label_smoothing") == "0.2");
  BOOST_TEST(last_field(plain, "start", "label_smoothing").empty());
  // Ten classes at 0.2: a perfect prediction of the smoothed target still costs its entropy,
  // -(0.82 ln 0.82 + 9 * 0.02 ln 0.02) = 0.867.
  BOOST_TEST(std::stod(last_field(smoothed, "epoch", "train_loss")) > 0.867);
  BOOST_TEST(std::stod(last_field(smoothed, "epoch", "train_loss")) >
             std::stod(last_field(plain, "epoch", "train_loss")));
  BOOST_TEST(smoothed.digest() != plain.digest());

  run_quick(dir, "first",
            {"--epochs", "1", "--label-smoothing", "0.2", "--checkpoint-dir", checkpoints});
  const TrainRun resumed =
      run_quick(dir, "resumed", {"--epochs", "2", "--resume", checkpoints + "/step-00000050.ckpt"});
  BOOST_TEST(last_field(resumed, "start", "label_smoothing") == "0.2");
  BOOST_TEST(resumed.digest() == smoothed.digest());
}

BOOST_AUTO_TEST_CASE(bad_values_are_usage_errors_naming_the_flag) {
  check_usage_error(quick_train_args({"--label-smoothing", "1"}),
                    "--label-smoothing must be in [0, 1)");
  check_usage_error(quick_train_args({"--label-smoothing", "-0.1"}), "--label-smoothing");
  check_usage_error(quick_train_args({"--label-smoothing", "nan"}), "--label-smoothing");
  const ProcessResult help = run_alloy({"train", "--help"});
  BOOST_TEST(help.output.find("--label-smoothing") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
