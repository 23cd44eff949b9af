// AdamW with skipped steps across a checkpoint: a dynamic loss scale that starts too high makes the
// first steps overflow and skip; the optimizer's saved step count leaves them out (AdamW's bias
// correction does not advance on a skipped step), and a run resumed from a mid-epoch checkpoint
// taken after them ends bit-identical to the run that was never stopped.
#include <boost/test/unit_test.hpp>

#include "core/checkpoint/checkpoint_file.h"
#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;

namespace {

// quick_train_args' run (the MLP on the synthetic set, one thread) with AdamW instead of SGD.
std::vector<std::string> adamw_args(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "train",    "--model",          "mlp",     "--dataset",   "synthetic", "--device",
      "cpu",      "--threads",        "1",       "--optimizer", "adamw",     "--lr",
      "0.001",    "--weight-decay",   "0.01",    "--opt-level", "O2",        "--init-loss-scale",
      "16777216", "--max-loss-scale", "16777216"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(adamw_resume)

BOOST_AUTO_TEST_CASE(skipped_steps_are_not_counted_and_resume_is_bit_exact) {
  TempDir dir;
  const std::string run_dir = dir.file("run");
  const TrainRun straight = run_logged(dir, "straight", adamw_args({"--epochs", "2"}));
  const TrainRun saving =
      run_logged(dir, "saving",
                 adamw_args({"--epochs", "2", "--checkpoint-dir", run_dir, "--checkpoint-every",
                             "15", "--keep-checkpoints", "20"}));
  BOOST_TEST(!straight.digest().empty());
  BOOST_TEST(saving.digest() == straight.digest());

  const std::string path = ckpt::checkpoint_path(run_dir, 30);
  const ckpt::CheckpointState state = ckpt::read_checkpoint(path);
  BOOST_TEST_REQUIRE(state.scaler.skipped_steps > 0, "the initial scale made no step overflow");
  BOOST_TEST(state.step == 30);
  BOOST_TEST(state.optimizer.steps == state.step - state.scaler.skipped_steps);

  const TrainRun resumed =
      run_logged(dir, "resumed", adamw_args({"--epochs", "2", "--resume", path}));
  BOOST_TEST(resumed.digest() == straight.digest());
}

BOOST_AUTO_TEST_SUITE_END()
