// Checkpoints of sequence models beyond the plain save and resume (gpt_train_test.cpp):
// --async-checkpoint writes the files synchronous saves write and resumes bit for bit; a worker
// killed with SIGKILL under --max-restarts is restarted from the newest checkpoint and ends with
// the weights of a run never interrupted, and without restarts left the failure is the exit
// status (an asynchronous save that fails: gpt_read_only_checkpoint_test.cpp). Workers are
// killed from here once the JSON log shows a given checkpoint, as elastic_restart_test.cpp does.
#include <signal.h>
#include <sys/types.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/checkpoint/checkpoint_file.h"
#include "tests/e2e/checkpoint_runs.h"
#include "tests/e2e/gpt_runs.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> steps_of(const std::string& log) {
  std::vector<std::string> steps;
  for (const std::string& line : events(log, "checkpoint"))
    steps.push_back(json_field(line, "step"));
  return steps;
}

// Long enough that a worker killed after its checkpoint of step 10 is still training: about a
// millisecond a step and a few a save (half a second in all), saves every 10 steps into `dir`.
std::vector<std::string> job_args(const Corpus& corpus, const std::string& dir) {
  return with(tiny_gpt(corpus.path), {"--dropout", "0.1", "--steps", "400", "--checkpoint-every",
                                      "10", "--checkpoint-dir", corpus.dir.file(dir)});
}

// Waits until the log at `path` holds, after its `restarts`-th restart event, a checkpoint event
// of step `step` or later; false after 60 s.
bool wait_for_checkpoint(const std::string& path, std::size_t restarts, int step) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    const std::string log = read_text(path);
    if (events(log, "restart").size() == restarts) {
      const std::string tail = restarts == 0 ? log : log.substr(log.rfind("\"event\":\"restart\""));
      for (const std::string& line : events(tail, "checkpoint")) {
        if (std::stoi(json_field(line, "step")) >= step) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// The launcher's one worker, killed with SIGKILL.
void kill_the_worker(const BackgroundAlloy& job) {
  const std::vector<pid_t> workers = workers_of(job.pid());
  BOOST_TEST_REQUIRE(workers.size() == 1u, "no worker to kill: no launcher, or the run has ended");
  BOOST_TEST_REQUIRE(::kill(workers[0], SIGKILL) == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt_checkpoints)

BOOST_AUTO_TEST_CASE(asynchronous_saves_write_the_synchronous_files_and_resume_bit_for_bit) {
  Corpus corpus;
  const auto args =
      with(tiny_gpt(corpus.path), {"--dropout", "0.1", "--steps", "12", "--checkpoint-every", "4"});
  const std::string sync_dir = corpus.dir.file("sync"), async_dir = corpus.dir.file("async");
  const TrainRun sync = run_logged(corpus.dir, "sync", with(args, {"--checkpoint-dir", sync_dir}));
  const TrainRun async = run_logged(
      corpus.dir, "async", with(args, {"--checkpoint-dir", async_dir, "--async-checkpoint"}));
  BOOST_TEST_REQUIRE(!sync.digest().empty());
  BOOST_TEST(async.digest() == sync.digest());
  const std::vector<std::string> expected = {"4", "8", "12"};
  BOOST_TEST(steps_of(sync.log) == expected, boost::test_tools::per_element());
  BOOST_TEST(steps_of(async.log) == expected, boost::test_tools::per_element());
  for (const std::string& step : expected) {
    const std::string mine = ckpt::checkpoint_path(async_dir, std::stoll(step));
    BOOST_TEST_CONTEXT(mine) {
      const ckpt::CheckpointState theirs =
          ckpt::read_checkpoint(ckpt::checkpoint_path(sync_dir, std::stoll(step)));
      const ckpt::CheckpointState state = ckpt::read_checkpoint(mine);
      BOOST_TEST(!state.parameters.empty());
      BOOST_TEST(state.params_digest == theirs.params_digest);
      BOOST_TEST(state.optimizer.steps == theirs.optimizer.steps);
      BOOST_TEST_REQUIRE(state.parameters.size() == theirs.parameters.size());
      for (std::size_t i = 0; i < state.parameters.size(); ++i)
        BOOST_TEST(state.parameters[i].data == theirs.parameters[i].data, state.parameters[i].name);
      BOOST_TEST_REQUIRE(state.optimizer_state.size() == theirs.optimizer_state.size());
      for (std::size_t i = 0; i < state.optimizer_state.size(); ++i) {
        BOOST_TEST(state.optimizer_state[i].data == theirs.optimizer_state[i].data,
                   state.optimizer_state[i].name);
      }
    }
  }
  // The end waited for the last save.
  BOOST_TEST(async.log.rfind("\"event\":\"checkpoint\"") < async.log.rfind("\"event\":\"end\""));

  const TrainRun resumed =
      run_logged(corpus.dir, "resumed",
                 with(args, {"--checkpoint-dir", corpus.dir.file("resumed"), "--async-checkpoint",
                             "--resume", ckpt::checkpoint_path(async_dir, 4)}));
  BOOST_TEST(resumed.digest() == sync.digest());
  BOOST_TEST(steps_of(resumed.log) == (std::vector<std::string>{"8", "12"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_killed_worker_restarts_from_the_newest_checkpoint_and_ends_bit_identical) {
  Corpus corpus;
  const TrainRun straight = run_logged(corpus.dir, "straight", job_args(corpus, "straight"));
  BOOST_TEST_REQUIRE(!straight.digest().empty());
  const std::string log = corpus.dir.file("job.jsonl");
  int status = -1;
  {
    BackgroundAlloy job(with(job_args(corpus, "run"), {"--max-restarts", "1", "--log-json", log}),
                        corpus.dir.file("out"), corpus.dir.file("err"));
    BOOST_TEST_REQUIRE(wait_for_checkpoint(log, 0, 10), read_text(corpus.dir.file("err")));
    kill_the_worker(job);
    status = job.wait();
  }
  const std::string errors = read_text(corpus.dir.file("err"));
  BOOST_TEST_MESSAGE(errors);
  BOOST_TEST(status == 0, errors);
  BOOST_TEST(errors.find("restart 1 of at most 1 after: ") != std::string::npos, errors);
  const std::string text = read_text(log);
  const auto restarts = events(text, "restart");
  BOOST_TEST_REQUIRE(restarts.size() == 1u, text);
  BOOST_TEST(json_field(restarts[0], "generation") == "1");
  BOOST_TEST(json_field(restarts[0], "cause").find("was killed by SIGKILL") != std::string::npos,
             restarts[0]);
  const std::string resumed_from = json_field(restarts[0], "checkpoint");
  BOOST_TEST(!resumed_from.empty(), restarts[0]);
  BOOST_TEST(errors.find("resuming from " + resumed_from + " at step") != std::string::npos,
             errors);
  // The restarted worker's start event follows the restart event, in the same log.
  BOOST_TEST(events(text, "start").size() == 2u);
  BOOST_TEST(text.rfind("\"event\":\"restart\"") < text.rfind("\"event\":\"start\""));
  const auto end = events(text, "end");
  BOOST_TEST_REQUIRE(end.size() == 1u, text);
  BOOST_TEST(json_field(end[0], "params_digest") == straight.digest());
}

BOOST_AUTO_TEST_CASE(without_restarts_left_the_failure_is_the_exit_status) {
  Corpus corpus;
  // --max-restarts 0: no launcher; the killed process is the run.
  {
    const std::string log = corpus.dir.file("none.jsonl");
    BackgroundAlloy run(with(job_args(corpus, "none"), {"--max-restarts", "0", "--log-json", log}),
                        corpus.dir.file("none.out"), corpus.dir.file("none.err"));
    BOOST_TEST_REQUIRE(wait_for_checkpoint(log, 0, 10), read_text(corpus.dir.file("none.err")));
    BOOST_TEST_REQUIRE(workers_of(run.pid()).empty(), "--max-restarts 0 started a launcher");
    run.signal(SIGKILL);
    BOOST_TEST(run.wait() == 128 + SIGKILL);
    BOOST_TEST(events(read_text(log), "restart").empty());
  }
  // --max-restarts 1, killed once more after the restart: the launcher gives up with the cause.
  const std::string log = corpus.dir.file("once.jsonl");
  int status = -1;
  {
    BackgroundAlloy job(with(job_args(corpus, "once"), {"--max-restarts", "1", "--log-json", log}),
                        corpus.dir.file("once.out"), corpus.dir.file("once.err"));
    BOOST_TEST_REQUIRE(wait_for_checkpoint(log, 0, 10), read_text(corpus.dir.file("once.err")));
    kill_the_worker(job);
    BOOST_TEST_REQUIRE(wait_for_checkpoint(log, 1, 0), read_text(corpus.dir.file("once.err")));
    kill_the_worker(job);
    status = job.wait();
  }
  const std::string errors = read_text(corpus.dir.file("once.err"));
  BOOST_TEST(status == 1, errors);
  const std::vector<std::string> reports = alloy_error_lines(errors);
  BOOST_TEST_REQUIRE(reports.size() == 1u, errors);
  BOOST_TEST(reports[0].find("after 1 restart (--max-restarts 1): ") != std::string::npos,
             reports[0]);
  BOOST_TEST(reports[0].find("was killed by SIGKILL") != std::string::npos, reports[0]);
  BOOST_TEST(events(read_text(log), "end").empty());
}

BOOST_AUTO_TEST_SUITE_END()
