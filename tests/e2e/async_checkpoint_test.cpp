// --async-checkpoint: saves on a writer thread change nothing in the run (same params_digest, same
// checkpoint events and files as synchronous saves), every logged file is complete,
// --keep-checkpoints keeps the newest, and SIGTERM waits for the save in flight so that the run
// resumes to the uninterrupted digest.
#include <signal.h>

#include <boost/test/unit_test.hpp>

#include "core/checkpoint/checkpoint_file.h"
#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;

namespace {

std::vector<std::string> saving(const std::string& dir, const std::vector<std::string>& more) {
  std::vector<std::string> args = {"--opt-level",        "O2", "--epochs",           "2",
                                   "--checkpoint-dir",   dir,  "--checkpoint-every", "10",
                                   "--keep-checkpoints", "2"};
  args.insert(args.end(), more.begin(), more.end());
  return quick_train_args(args);
}

std::vector<std::string> steps_of(const std::string& log) {
  std::vector<std::string> steps;
  for (const std::string& line : events(log, "checkpoint"))
    steps.push_back(json_field(line, "step"));
  return steps;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(async_checkpoint)

BOOST_AUTO_TEST_CASE(asynchronous_saves_equal_synchronous_ones) {
  TempDir dir;
  const TrainRun sync = run_logged(dir, "sync", saving(dir.file("sync"), {}));
  const TrainRun async =
      run_logged(dir, "async", saving(dir.file("async"), {"--async-checkpoint"}));
  BOOST_TEST(!async.digest().empty());
  BOOST_TEST(async.digest() == sync.digest());
  const std::vector<std::string> expected = {"10", "20", "30", "40", "50",
                                             "60", "70", "80", "90", "100"};
  BOOST_TEST(steps_of(async.log) == expected, boost::test_tools::per_element());
  BOOST_TEST(steps_of(sync.log) == expected, boost::test_tools::per_element());
  // The newest two are kept, complete, and hold what the synchronous run saved.
  const auto kept = ckpt::list_checkpoints(dir.file("async"));
  BOOST_TEST_REQUIRE(kept.size() == 2u);
  for (const auto& entry : kept) {
    BOOST_TEST_CONTEXT(entry.path) {
      const ProcessResult verify = run_alloy({"ckpt", "verify", entry.path});
      BOOST_TEST(verify.exit_code == 0, verify.errors);
      const auto theirs =
          ckpt::read_checkpoint(ckpt::checkpoint_path(dir.file("sync"), entry.step));
      BOOST_TEST(ckpt::read_checkpoint(entry.path).params_digest == theirs.params_digest);
    }
  }
  // The end event comes after the last checkpoint event: the end waited for the save.
  BOOST_TEST(async.log.rfind("\"event\":\"checkpoint\"") < async.log.rfind("\"event\":\"end\""));
}

BOOST_AUTO_TEST_CASE(sigterm_waits_for_the_save_and_the_run_resumes_exactly) {
  TempDir dir;
  const std::string run_dir = dir.file("run");
  const std::string log = dir.file("interrupted.jsonl");
  {
    BackgroundAlloy run(saving(run_dir, {"--async-checkpoint", "--log-json", log}), dir.file("out"),
                        dir.file("err"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (events(read_text(log), "checkpoint").empty() &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    run.signal(SIGTERM);
    BOOST_TEST(run.wait() == 1);
  }
  const std::string errors = read_text(dir.file("err"));
  BOOST_TEST(errors.find("stopped by SIGTERM at step") != std::string::npos, errors);
  const auto saved = events(read_text(log), "checkpoint");
  BOOST_TEST_REQUIRE(!saved.empty());
  const std::string last = json_field(saved.back(), "path");
  BOOST_TEST(errors.find("saved " + last) != std::string::npos, errors);
  const ProcessResult verify = run_alloy({"ckpt", "verify", last});
  BOOST_TEST(verify.exit_code == 0, verify.errors);

  const TrainRun resumed =
      run_logged(dir, "resumed", saving(run_dir, {"--async-checkpoint", "--resume", run_dir}));
  const TrainRun straight = run_logged(dir, "straight", saving(dir.file("straight"), {}));
  BOOST_TEST(resumed.digest() == straight.digest());
}

BOOST_AUTO_TEST_CASE(async_checkpoint_needs_a_checkpoint_dir) {
  const ProcessResult result = run_alloy(quick_train_args({"--async-checkpoint"}));
  BOOST_TEST(result.exit_code == 2);
  BOOST_TEST(result.errors.find("--async-checkpoint needs --checkpoint-dir") != std::string::npos,
             result.errors);
}

BOOST_AUTO_TEST_SUITE_END()
