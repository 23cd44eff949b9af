// Bit-exact resume on the CPU (docs/checkpoints.md): a run stopped and resumed - after an epoch,
// from a mid-epoch --checkpoint-every checkpoint, or after SIGTERM - ends with the same
// params_digest and reports the same per-epoch train_loss as the run that was never stopped, at O0
// and at O2 (loss-scaler state included: the short --scale-window makes the dynamic scale grow
// during the run).
#include <signal.h>

#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <map>

#include "core/checkpoint/checkpoint_file.h"
#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;

namespace {

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

std::vector<std::string> level_flags(const std::string& level) {
  if (level == "O0") return {"--opt-level", "O0"};
  return {"--opt-level", level, "--scale-window", "30"};
}

// The uninterrupted two-epoch run of each opt level, computed once.
const TrainRun& straight_run(const std::string& level) {
  static std::map<std::string, TrainRun> runs;
  static TempDir dir;
  auto found = runs.find(level);
  if (found == runs.end()) {
    TrainRun run = run_logged(dir, "straight-" + level,
                              quick_train_args(with(level_flags(level), {"--epochs", "2"})));
    BOOST_TEST_REQUIRE(!run.digest().empty(), run.log);
    found = runs.emplace(level, run).first;
  }
  return found->second;
}

void check_same_as_straight(const TrainRun& resumed, const std::string& level,
                            const std::vector<int>& epochs) {
  const TrainRun& straight = straight_run(level);
  BOOST_TEST(resumed.digest() == straight.digest());
  for (const int epoch : epochs) {
    BOOST_TEST_CONTEXT("epoch " << epoch) {
      BOOST_TEST(!resumed.train_loss(epoch).empty());
      BOOST_TEST(resumed.train_loss(epoch) == straight.train_loss(epoch));
    }
  }
}

void check_epoch_resume(const std::string& level) {
  TempDir dir;
  const std::string run_dir = dir.file("run");
  const std::vector<std::string> flags = with(level_flags(level), {"--checkpoint-dir", run_dir});
  const TrainRun first = run_logged(dir, "first", quick_train_args(with(flags, {"--epochs", "1"})));
  BOOST_TEST(first.train_loss(1) == straight_run(level).train_loss(1));
  const auto saved = events(first.log, "checkpoint");
  BOOST_TEST_REQUIRE(saved.size() == 1u, first.log);
  BOOST_TEST(json_field(saved[0], "step") == "50");
  BOOST_TEST(json_field(saved[0], "path") == ckpt::checkpoint_path(run_dir, 50));

  const TrainRun second = run_logged(
      dir, "second", quick_train_args(with(flags, {"--epochs", "2", "--resume", run_dir})));
  BOOST_TEST(second.process.errors.find("resuming from " + ckpt::checkpoint_path(run_dir, 50)) !=
             std::string::npos);
  BOOST_TEST(events(second.log, "epoch").size() == 1u);
  check_same_as_straight(second, level, {2});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_resume)

BOOST_AUTO_TEST_CASE(one_epoch_then_resume_equals_two_epochs_at_O0) {
  check_epoch_resume("O0");
}

BOOST_AUTO_TEST_CASE(one_epoch_then_resume_equals_two_epochs_at_O2) {
  check_epoch_resume("O2");
}

BOOST_AUTO_TEST_CASE(mid_epoch_checkpoints_resume_exactly) {
  for (const std::string level : {"O0", "O2"}) {
    BOOST_TEST_CONTEXT(level) {
      TempDir dir;
      const std::string run_dir = dir.file("run");
      const TrainRun full =
          run_logged(dir, "full",
                     quick_train_args(with(level_flags(level), {"--epochs", "2", "--checkpoint-dir",
                                                                run_dir, "--checkpoint-every", "15",
                                                                "--keep-checkpoints", "20"})));
      BOOST_TEST(full.digest() == straight_run(level).digest());  // saving changes nothing
      std::vector<std::string> steps;
      for (const auto& line : events(full.log, "checkpoint"))
        steps.push_back(json_field(line, "step"));
      const std::vector<std::string> expected = {"15", "30", "45", "50", "60", "75", "90", "100"};
      BOOST_TEST(steps == expected, boost::test_tools::per_element());

      // Step 30 is in the first epoch, step 60 in the second.
      for (const int step : {30, 60}) {
        BOOST_TEST_CONTEXT("resumed from step " << step) {
          const TrainRun resumed = run_logged(
              dir, "from-" + std::to_string(step),
              quick_train_args(with(level_flags(level), {"--epochs", "2", "--resume",
                                                         ckpt::checkpoint_path(run_dir, step)})));
          check_same_as_straight(resumed, level,
                                 step < 50 ? std::vector<int>{1, 2} : std::vector<int>{2});
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(sigterm_saves_a_checkpoint_and_the_resumed_run_ends_the_same) {
  TempDir dir;
  const std::string run_dir = dir.file("run");
  const std::string log = dir.file("interrupted.jsonl");
  const std::vector<std::string> flags =
      with(level_flags("O2"), {"--epochs", "2", "--checkpoint-dir", run_dir});
  {
    BackgroundAlloy run(
        quick_train_args(with(flags, {"--checkpoint-every", "5", "--log-json", log})),
        dir.file("out"), dir.file("err"));
    // Signal once training is under way (the first checkpoint was written).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (events(read_text(log), "checkpoint").empty() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    run.signal(SIGTERM);
    BOOST_TEST(run.wait() == 1);
  }
  const std::string errors = read_text(dir.file("err"));
  BOOST_TEST_MESSAGE("interrupted run: " << errors);
  BOOST_TEST(errors.find("stopped by SIGTERM at step") != std::string::npos, errors);
  BOOST_TEST(errors.find("continue with --resume " + run_dir) != std::string::npos, errors);
  const auto saved = events(read_text(log), "checkpoint");
  BOOST_TEST_REQUIRE(!saved.empty());
  BOOST_TEST(events(read_text(log), "end").empty());
  const std::string last = json_field(saved.back(), "path");
  BOOST_TEST(errors.find("saved " + last) != std::string::npos, errors);
  BOOST_TEST(std::stoi(json_field(saved.back(), "step")) < 100);

  const TrainRun resumed =
      run_logged(dir, "resumed", quick_train_args(with(flags, {"--resume", run_dir})));
  BOOST_TEST(resumed.digest() == straight_run("O2").digest());
  BOOST_TEST(resumed.train_loss(2) == straight_run("O2").train_loss(2));
}

BOOST_AUTO_TEST_CASE(only_the_newest_k_checkpoints_are_kept) {
  TempDir dir;
  const std::string run_dir = dir.file("run");
  run_logged(dir, "run",
             quick_train_args({"--epochs", "1", "--checkpoint-dir", run_dir, "--checkpoint-every",
                               "10", "--keep-checkpoints", "2"}));
  std::vector<std::string> left;
  for (const auto& entry : ckpt::list_checkpoints(run_dir))
    left.push_back(entry.path);
  const std::vector<std::string> expected = {ckpt::checkpoint_path(run_dir, 40),
                                             ckpt::checkpoint_path(run_dir, 50)};
  BOOST_TEST(left == expected, boost::test_tools::per_element());

  // A run resumed from an earlier point into a directory that holds a later checkpoint (of
  // the abandoned continuation) keeps its own newest K and leaves the later file alone.
  const std::string other = dir.file("other");
  std::filesystem::create_directories(other);
  std::filesystem::copy_file(ckpt::checkpoint_path(run_dir, 50), ckpt::checkpoint_path(other, 200));
  run_logged(dir, "resumed",
             quick_train_args({"--epochs", "1", "--resume", ckpt::checkpoint_path(run_dir, 40),
                               "--checkpoint-dir", other, "--keep-checkpoints", "1"}));
  left.clear();
  for (const auto& entry : ckpt::list_checkpoints(other))
    left.push_back(entry.path);
  const std::vector<std::string> expected_other = {ckpt::checkpoint_path(other, 50),
                                                   ckpt::checkpoint_path(other, 200)};
  BOOST_TEST(left == expected_other, boost::test_tools::per_element());
}

// A checkpoint resumed at another opt level keeps training: the fp32 weights go into the
// masters and the half model, and one more epoch loses no more than 0.01 of test accuracy.
BOOST_AUTO_TEST_CASE(checkpoints_resume_at_other_opt_levels) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"O2", {"O0", "O1", "O3"}}, {"O0", {"O2"}}};
  for (const auto& [from, targets] : cases) {
    TempDir dir;
    const std::string run_dir = dir.file("run");
    const TrainRun first = run_logged(
        dir, "first",
        quick_train_args(with(level_flags(from), {"--epochs", "1", "--checkpoint-dir", run_dir})));
    const double before = std::stod(json_field(events(first.log, "epoch").back(), "test_acc"));
    for (const std::string& level : targets) {
      BOOST_TEST_CONTEXT(from << " checkpoint resumed at " << level) {
        const TrainRun resumed =
            run_logged(dir, "at-" + level,
                       quick_train_args({"--opt-level", level, "--epochs", "2", "--resume", run_dir,
                                         "--checkpoint-dir", dir.file(level)}));
        const auto epochs = events(resumed.log, "epoch");
        BOOST_TEST_REQUIRE(epochs.size() == 1u);
        BOOST_TEST(json_field(epochs[0], "epoch") == "2");
        BOOST_TEST(std::stod(json_field(epochs[0], "test_acc")) >= before - 0.01);
        BOOST_TEST(json_field(events(resumed.log, "start")[0], "opt_level") == level);
        const ProcessResult info =
            run_alloy({"ckpt", "info", "--json", ckpt::checkpoint_path(dir.file(level), 100)});
        BOOST_TEST(json_field(info.output, "opt_level") == level);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
