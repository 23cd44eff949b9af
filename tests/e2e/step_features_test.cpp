// The step's optional features together: O2 with the dynamic loss scaler, gradient accumulation,
// gradient-norm clipping and a warm-up + cosine schedule in one run. A run resumed from a
// mid-epoch checkpoint, given no feature flag (only the total --epochs, which is never taken from a
// checkpoint), takes all of them from the checkpoint and ends bit-identical to the run that was
// never stopped; data-parallel ranks end with equal weights.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint_file.h"
#include "tests/e2e/checkpoint_runs.h"
#include "tests/parallel/forked.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;

namespace {

std::vector<std::string> featured(const std::vector<std::string>& more) {
  std::vector<std::string> args = quick_train_args(
      {"--epochs", "2", "--opt-level", "O2", "--accumulation-steps", "2", "--clip-grad-norm", "0.5",
       "--lr-schedule", "cosine", "--warmup-steps", "10", "--min-lr", "0.001"});
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(step_features)

BOOST_AUTO_TEST_CASE(all_together_resume_bit_for_bit_from_the_checkpoint_alone) {
  TempDir dir;
  const std::string run_dir = dir.file("run");
  const TrainRun straight = run_logged(dir, "straight", featured({}));
  const auto start = events(straight.log, "start");
  BOOST_TEST_REQUIRE(start.size() == 1u);
  BOOST_TEST(json_field(start[0], "accumulation_steps") == "2");
  BOOST_TEST(json_field(start[0], "clip_grad_norm") == "0.5");
  BOOST_TEST(json_field(start[0], "lr_schedule") == "cosine");
  const auto epochs = events(straight.log, "epoch");
  BOOST_TEST_REQUIRE(epochs.size() == 2u);
  BOOST_TEST(std::stoi(json_field(epochs[0], "clipped_steps")) > 0);

  run_logged(dir, "saving",
             featured({"--checkpoint-dir", run_dir, "--checkpoint-every", "30",
                       "--keep-checkpoints", "10"}));
  const TrainRun resumed = run_logged(
      dir, "resumed",
      quick_train_args({"--epochs", "2", "--resume", ckpt::checkpoint_path(run_dir, 30)}));
  const auto resumed_start = events(resumed.log, "start");
  BOOST_TEST_REQUIRE(resumed_start.size() == 1u);
  BOOST_TEST(json_field(resumed_start[0], "opt_level") == "O2");
  BOOST_TEST(json_field(resumed_start[0], "accumulation_steps") == "2");
  BOOST_TEST(json_field(resumed_start[0], "clip_grad_norm") == "0.5");
  BOOST_TEST(json_field(resumed_start[0], "lr_schedule") == "cosine");
  BOOST_TEST(!straight.digest().empty());
  BOOST_TEST(resumed.digest() == straight.digest());
}

BOOST_AUTO_TEST_CASE(all_together_data_parallel_ranks_end_equal) {
  TempDir dir;
  const TrainRun run = run_logged(dir, "ddp",
                                  featured({"--gpus", "2", "--batch-size", "128", "--master-port",
                                            std::to_string(free_port())}));
  const std::string digest = run.digest();
  BOOST_TEST(!digest.empty());
  BOOST_TEST(run.log.find("\"params_digests\":[\"" + digest + "\",\"" + digest + "\"]") !=
                 std::string::npos,
             run.log);
}

BOOST_AUTO_TEST_SUITE_END()
