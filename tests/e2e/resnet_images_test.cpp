// The ImageNet-class ResNets end to end on 3-channel synthetic images at 64x64 (their ImageNet
// stem): the parameter count in the log, --steps bounding the run mid-epoch, and a run stopped
// by --steps and resumed from its checkpoint ending bit-exactly as the run that was never
// stopped, at O0 and O2; plus the data flags' usage errors.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

namespace {

// resnet50, 64x64x3, 48 training examples at batch 4: 12 steps an epoch, one thread.
std::vector<std::string> resnet_args(const std::string& level,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "train", "--model",      "resnet50", "--dataset",     "synthetic", "--image-size",
      "64",    "--channels",   "3",        "--num-classes", "5",         "--synthetic-size",
      "48",    "--batch-size", "4",        "--device",      "cpu",       "--threads",
      "1",     "--momentum",   "0.9",      "--lr",          "0.01",      "--opt-level",
      level};
  // A scale low enough that O2's first steps do not overflow (and are not skipped).
  if (level == "O1" || level == "O2") args.insert(args.end(), {"--init-loss-scale", "256"});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(resnet_images)

BOOST_AUTO_TEST_CASE(steps_bound_the_run_and_a_resume_continues_bit_exactly) {
  for (const std::string level : {"O0", "O2"}) {
    BOOST_TEST_CONTEXT(level) {
      TempDir dir;
      const TrainRun straight = run_logged(dir, "straight", resnet_args(level, {"--steps", "4"}));
      BOOST_TEST_REQUIRE(!straight.digest().empty(), straight.process.errors);
      const auto start = events(straight.log, "start");
      BOOST_TEST_REQUIRE(start.size() == 1u);
      BOOST_TEST(json_field(start[0], "image_size") == "64");
      BOOST_TEST(json_field(start[0], "channels") == "3");
      BOOST_TEST(json_field(start[0], "classes") == "5");
      // The end's step is the bound, inside the first epoch of 12 steps.
      BOOST_TEST(json_field(events(straight.log, "end").at(0), "step") == "4");
      const auto epochs = events(straight.log, "epoch");
      BOOST_TEST_REQUIRE(epochs.size() == 1u, straight.log);
      BOOST_TEST(json_field(epochs[0], "step") == "4");
      BOOST_TEST(!json_field(epochs[0], "test_acc").empty());
      BOOST_TEST(json_field(epochs[0], "skipped_steps") == "0");

      const std::string run_dir = dir.file("run");
      const TrainRun first = run_logged(
          dir, "first", resnet_args(level, {"--steps", "2", "--checkpoint-dir", run_dir}));
      BOOST_TEST_REQUIRE(events(first.log, "checkpoint").size() == 1u, first.log);
      BOOST_TEST(first.digest() != straight.digest());
      const TrainRun second =
          run_logged(dir, "second", resnet_args(level, {"--steps", "4", "--resume", run_dir}));
      BOOST_TEST(second.digest() == straight.digest(), second.process.errors);
      BOOST_TEST(json_field(events(second.log, "end").at(0), "step") == "4");
    }
  }
}

BOOST_AUTO_TEST_CASE(o1_and_o3_train_too) {
  for (const std::string level : {"O1", "O3"}) {
    BOOST_TEST_CONTEXT(level) {
      TempDir dir;
      const TrainRun run = run_logged(dir, "run", resnet_args(level, {"--steps", "2"}));
      const auto epochs = events(run.log, "epoch");
      BOOST_TEST_REQUIRE(epochs.size() == 1u, run.log);
      BOOST_TEST(json_field(epochs[0], "skipped_steps") == "0");
      const double loss = std::stod(json_field(epochs[0], "train_loss"));
      BOOST_TEST((loss > 0.0 && loss < 20.0), "train_loss " << loss);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_imagenet_resnets_report_torchvisions_parameter_counts) {
  // At 64x64 the ImageNet stem is in use: the counts are torchvision's with 5 classes.
  // resnet18 at 1000 classes has 11,689,512; the fc's 513 * (1000 - 5) fewer here.
  TempDir dir;
  const TrainRun run = run_logged(
      dir, "resnet18",
      {"train", "--model",      "resnet18", "--dataset",     "synthetic", "--image-size",
       "64",    "--channels",   "3",        "--num-classes", "5",         "--synthetic-size",
       "8",     "--batch-size", "4",        "--steps",       "1",         "--device",
       "cpu",   "--threads",    "1"});
  BOOST_TEST_REQUIRE(events(run.log, "start").size() == 1u, run.process.errors);
  BOOST_TEST(json_field(events(run.log, "start")[0], "parameters") ==
             std::to_string(11689512 - 513 * (1000 - 5)));
}

BOOST_AUTO_TEST_CASE(data_flags_give_usage_errors_naming_them) {
  const std::vector<std::string> base = {"train", "--model", "resnet18", "--device", "cpu"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  check_usage_error(with({"--dataset", "synthetic", "--synthetic-size", "0"}), "--synthetic-size");
  check_usage_error(with({"--dataset", "mnist", "--synthetic-size", "100"}), "--synthetic-size");
  check_usage_error(with({"--dataset", "synthetic", "--image-size", "0"}), "--image-size");
  check_usage_error(with({"--dataset", "synthetic", "--channels", "2"}), "--channels");
  check_usage_error(with({"--dataset", "synthetic", "--normalize", "1,2/0"}), "--normalize");
  check_usage_error(with({"--dataset", "synthetic", "--channels", "3", "--normalize", "0.5/0.5"}),
                    "--normalize");
  check_usage_error(
      with({"--dataset", "synthetic", "--synthetic-size", "10", "--batch-size", "11"}),
      "--batch-size");
  check_usage_error(with({"--dataset", "synthetic", "--steps", "-1"}), "--steps");
  // Real data is not resized: a clear failure (exit 1) naming the flag.
  const ProcessResult lenet = run_alloy({"train", "--model", "lenet", "--dataset", "synthetic",
                                         "--image-size", "32", "--device", "cpu"});
  BOOST_TEST(lenet.exit_code == 1);
  BOOST_TEST(lenet.errors.find("1x28x28") != std::string::npos, lenet.errors);
}

BOOST_AUTO_TEST_SUITE_END()
