// `alloy train --model ffn` end to end on the synthetic set: the transformer feed-forward stack
// (layer norm, GELU, dropout, residual sums) learns; a resume draws the straight run's dropout
// masks (they follow the optimizer's step count, which the checkpoint carries), so 1 + 1 epochs
// end with 2 epochs' bits; recomputing its blocks changes no bit; splitting the batch into
// micro-batches draws the same masks, so the losses agree to float rounding, where another
// seed's masks do not; every opt level trains it. (The layers' own tests: tests/core/ops/
// layer_norm_test.cpp, gelu_test.cpp, dropout_test.cpp; two ranks: tests/parallel/
// train_ddp_multiproc_test.cpp.)
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

namespace {

// 2560 examples: 10 steps an epoch at batch 256, enough to learn the synthetic classes (test
// accuracy about 0.75 after one epoch, 1 after two).
std::vector<std::string> ffn_args(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "train", "--model",   "ffn", "--dataset", "synthetic", "--synthetic-size", "2560", "--device",
      "cpu",   "--threads", "1",   "--lr",      "0.05"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// One epoch with the defaults, checkpointed at its end: the run that the resume continues and
// that the other flags are held against, trained once for every case.
struct OneEpoch {
  TempDir dir;
  std::string checkpoints = dir.file("run");
  TrainRun run =
      run_logged(dir, "one-epoch", ffn_args({"--epochs", "1", "--checkpoint-dir", checkpoints}));
};

const OneEpoch& one_epoch() {
  static const OneEpoch run;
  return run;
}

double loss(const TrainRun& run, int epoch) {
  return std::stod(run.train_loss(epoch));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ffn_e2e)

BOOST_AUTO_TEST_CASE(it_learns_and_a_resume_draws_the_straight_runs_masks) {
  const TempDir dir;
  const TrainRun straight = run_logged(dir, "straight", ffn_args({"--epochs", "2"}));
  BOOST_TEST(loss(straight, 2) < loss(straight, 1));
  const auto ends = events(straight.log, "end");
  BOOST_TEST_REQUIRE(ends.size() == 1u);
  BOOST_TEST(std::stod(json_field(ends[0], "test_acc")) > 0.5);

  BOOST_TEST(one_epoch().run.digest() != straight.digest());
  const TrainRun resumed = run_logged(
      dir, "resumed",
      ffn_args({"--epochs", "2", "--resume", one_epoch().checkpoints + "/step-00000010.ckpt"}));
  BOOST_TEST(resumed.digest() == straight.digest());
}

BOOST_AUTO_TEST_CASE(recomputing_its_blocks_changes_no_bit) {
  const TempDir dir;
  const TrainRun& kept = one_epoch().run;
  const TrainRun recomputed =
      run_logged(dir, "recomputed", ffn_args({"--epochs", "1", "--recompute", "blocks"}));
  BOOST_TEST(json_field(events(recomputed.log, "start").at(0), "recompute") == "blocks");
  BOOST_TEST(recomputed.digest() == kept.digest());
}

// The masks are functions of the example's row in the whole batch, not in its micro-batch: two
// micro-batches of 128 train as one batch of 256 up to the rounding of the gradients' sums. A
// different seed's masks (and weights) move the loss far more.
BOOST_AUTO_TEST_CASE(micro_batches_draw_the_whole_batchs_masks) {
  const TempDir dir;
  const TrainRun& whole = one_epoch().run;
  const TrainRun split =
      run_logged(dir, "split", ffn_args({"--epochs", "1", "--accumulation-steps", "2"}));
  const TrainRun other_seed = run_logged(dir, "seed", ffn_args({"--epochs", "1", "--seed", "2"}));
  BOOST_TEST(std::abs(loss(split, 1) - loss(whole, 1)) <= 1e-4 * loss(whole, 1));
  BOOST_TEST(std::abs(loss(other_seed, 1) - loss(whole, 1)) > 1e-3 * loss(whole, 1));
}

BOOST_AUTO_TEST_CASE(every_opt_level_trains_it) {
  for (const std::string level : {"O1", "O2", "O3"}) {
    BOOST_TEST_CONTEXT(level) {
      const TempDir dir;
      const TrainRun run =
          run_logged(dir, level, ffn_args({"--epochs", "1", "--opt-level", level}));
      const double first = loss(run, 1);
      BOOST_TEST(std::isfinite(first));
      BOOST_TEST(std::stod(json_field(events(run.log, "end").at(0), "test_acc")) > 0.5);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
