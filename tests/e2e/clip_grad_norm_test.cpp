// `alloy train --clip-grad-norm X` end to end on short MLP runs over the synthetic set: the
// start event names the limit, the epoch event carries grad_norm and clipped_steps (every step
// clipped at a tiny limit, none at a huge one, whose weights then equal an unclipped run's bit
// for bit: a coefficient of 1 is exact), O2 clips too, bad values are usage errors naming the
// flag, a config file sets it, and a resume keeps it from the checkpoint.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"
#include "tests/support/process.h"

using namespace alloy::test;

namespace {

// One epoch (50 steps) with the JSON log.
TrainRun train(const TempDir& dir, const std::string& name, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--epochs", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_logged(dir, name, quick_train_args(args));
}

std::string epoch_field(const TrainRun& run, const std::string& key) {
  const auto epochs = events(run.log, "epoch");
  return epochs.empty() ? "" : json_field(epochs.back(), key);
}

std::string start_field(const TrainRun& run, const std::string& key) {
  const auto starts = events(run.log, "start");
  return starts.empty() ? "" : json_field(starts.back(), key);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(clip_grad_norm_e2e)

BOOST_AUTO_TEST_CASE(tiny_and_huge_limits_and_the_unclipped_run) {
  TempDir dir;
  const TrainRun tiny = train(dir, "tiny", {"--clip-grad-norm", "0.01"});
  const TrainRun huge = train(dir, "huge", {"--clip-grad-norm", "1e9"});
  const TrainRun off = train(dir, "off", {});
  BOOST_TEST(start_field(tiny, "clip_grad_norm") == "0.01");
  BOOST_TEST(epoch_field(tiny, "clipped_steps") == "50");
  const double norm = std::stod(epoch_field(tiny, "grad_norm"));
  BOOST_TEST(norm > 0.01);  // the norms before clipping, above the limit
  BOOST_TEST(tiny.process.output.find("clipped 50") != std::string::npos, tiny.process.output);

  BOOST_TEST(epoch_field(huge, "clipped_steps") == "0");
  BOOST_TEST(std::stod(epoch_field(huge, "grad_norm")) > 0.0);
  BOOST_TEST(huge.digest() == off.digest(), "a coefficient of 1 changes no bit");
  BOOST_TEST(tiny.digest() != off.digest());

  // Off: no clip keys anywhere.
  BOOST_TEST(start_field(off, "clip_grad_norm").empty());
  BOOST_TEST(epoch_field(off, "grad_norm").empty());
  BOOST_TEST(epoch_field(off, "clipped_steps").empty());
  BOOST_TEST(off.process.output.find("clipped") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(o2_clips_the_unscaled_gradients) {
  TempDir dir;
  const TrainRun o0 = train(dir, "o0", {"--clip-grad-norm", "0.5"});
  const TrainRun o2 = train(dir, "o2", {"--opt-level", "O2", "--clip-grad-norm", "0.5"});
  BOOST_TEST(epoch_field(o2, "loss_scale") == "65536");
  BOOST_TEST(epoch_field(o2, "skipped_steps") == "0");
  // The mean norm is O0's within half precision, not 65536 times it.
  const double norm0 = std::stod(epoch_field(o0, "grad_norm"));
  const double norm2 = std::stod(epoch_field(o2, "grad_norm"));
  BOOST_TEST(norm2 == norm0, boost::test_tools::tolerance(0.05));
  BOOST_TEST(epoch_field(o2, "clipped_steps") == epoch_field(o0, "clipped_steps"));
}

BOOST_AUTO_TEST_CASE(bad_values_are_usage_errors_naming_the_flag) {
  for (const std::string value : {"-1", "abc", "nan", "inf"}) {
    const ProcessResult result = run_alloy(quick_train_args({"--clip-grad-norm", value}));
    BOOST_TEST(result.exit_code == 2, value << ": " << result.errors);
    BOOST_TEST(result.errors.find("--clip-grad-norm") != std::string::npos, result.errors);
  }
}

BOOST_AUTO_TEST_CASE(a_config_file_sets_it) {
  TempDir dir;
  const std::string config = dir.file("clip.cfg");
  std::ofstream(config) << "clip-grad-norm = 0.25\n";
  const TrainRun run = train(dir, "config", {"--config", config});
  BOOST_TEST(start_field(run, "clip_grad_norm") == "0.25");
  BOOST_TEST(!epoch_field(run, "clipped_steps").empty());
}

// Epoch 1 saved with clipping, epoch 2 resumed without the flag: the checkpoint's limit is
// used (the start event says so), and the weights equal two epochs straight.
BOOST_AUTO_TEST_CASE(a_resume_keeps_the_checkpoints_limit) {
  TempDir dir;
  const std::string checkpoints = dir.file("run");
  const std::vector<std::string> clip = {"--clip-grad-norm", "0.05"};
  std::vector<std::string> first = {"--checkpoint-dir", checkpoints};
  first.insert(first.end(), clip.begin(), clip.end());
  train(dir, "first", first);
  const std::string saved = checkpoints + "/step-00000050.ckpt";  // epoch 1's end
  const TrainRun resumed =
      run_logged(dir, "resumed", quick_train_args({"--epochs", "2", "--resume", saved}));
  BOOST_TEST(start_field(resumed, "clip_grad_norm") == "0.05");
  BOOST_TEST(std::stol(epoch_field(resumed, "clipped_steps")) > 0);
  std::vector<std::string> straight = {"--epochs", "2"};
  straight.insert(straight.end(), clip.begin(), clip.end());
  const TrainRun whole = run_logged(dir, "straight", quick_train_args(straight));
  BOOST_TEST(resumed.digest() == whole.digest());
  // Given on the command line, the resume's own value wins: 0 turns clipping off.
  const TrainRun off = run_logged(
      dir, "off", quick_train_args({"--epochs", "2", "--resume", saved, "--clip-grad-norm", "0"}));
  BOOST_TEST(start_field(off, "clip_grad_norm").empty());
  BOOST_TEST(epoch_field(off, "clipped_steps").empty());
}

// Resumed mid-epoch, the epoch's grad_norm and clipped_steps cover the steps before the
// checkpoint too (its clip tally): the figures of the run never stopped, to the last digit.
BOOST_AUTO_TEST_CASE(a_mid_epoch_resume_reports_the_whole_epochs_clip_figures) {
  TempDir dir;
  const std::string checkpoints = dir.file("run");
  const TrainRun straight = train(dir, "straight", {"--clip-grad-norm", "0.5"});
  train(dir, "saving",
        {"--clip-grad-norm", "0.5", "--checkpoint-dir", checkpoints, "--checkpoint-every", "20"});
  const TrainRun resumed = train(dir, "resumed", {"--resume", checkpoints + "/step-00000020.ckpt"});
  BOOST_TEST(!epoch_field(straight, "grad_norm").empty());
  BOOST_TEST(epoch_field(resumed, "grad_norm") == epoch_field(straight, "grad_norm"));
  BOOST_TEST(epoch_field(resumed, "clipped_steps") == epoch_field(straight, "clipped_steps"));
  BOOST_TEST(resumed.digest() == straight.digest());
}

BOOST_AUTO_TEST_SUITE_END()
