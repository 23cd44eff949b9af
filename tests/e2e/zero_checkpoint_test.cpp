// Sharded checkpoints of --zero 1 jobs (two or three worker processes on the CPU, AdamW, the MLP
// on the synthetic set): a sharded checkpoint resumes bit-exactly at the same world size,
// synchronously or asynchronously saved; three ranks reading their new ranges of two ranks'
// shards continue as three ranks cutting their ranges out of the same state gathered into one
// plain file; a plain checkpoint resumes with --zero 1 (at two ranks --zero 1 trains bit for bit
// as plain data parallelism does, so to the plain run's digest); and a rank killed in the middle
// of a sharded save leaves no checkpoint: the job restarted by --max-restarts resumes from the
// save before and ends with the uninterrupted digest.
#include <signal.h>
#include <stdlib.h>

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/checkpoint/checkpoint_file.h"
#include "core/checkpoint/sharded_checkpoint.h"
#include "tests/e2e/checkpoint_runs.h"
#include "tests/parallel/forked.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;
namespace fs = std::filesystem;

namespace {

// 67 steps an epoch at a global batch of 192, which 1, 2 and 3 ranks split evenly.
std::vector<std::string> job_args(const std::string& checkpoints, int ranks, bool zero,
                                  const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"train",
                                   "--model",
                                   "mlp",
                                   "--dataset",
                                   "synthetic",
                                   "--device",
                                   "cpu",
                                   "--threads",
                                   "1",
                                   "--optimizer",
                                   "adamw",
                                   "--lr",
                                   "0.001",
                                   "--epochs",
                                   "2",
                                   "--batch-size",
                                   "192",
                                   "--checkpoint-dir",
                                   checkpoints,
                                   "--keep-checkpoints",
                                   "10",
                                   "--gpus",
                                   std::to_string(ranks),
                                   "--master-port",
                                   std::to_string(free_port())};
  if (zero) args.insert(args.end(), {"--zero", "1"});
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Two epochs of --zero 1 over two ranks with a checkpoint at each epoch's end, run once.
struct ZeroRun {
  TempDir dir;
  TrainRun run;
  std::string epoch1;  // the sharded checkpoint after the first epoch
  ZeroRun() {
    run = run_logged(dir, "zero", job_args(dir.file("run"), 2, true));
    epoch1 = ckpt::sharded_checkpoint_dir(dir.file("run"), 67);
  }
};

const ZeroRun& zero_run() {
  static ZeroRun run;
  return run;
}

// A copy of the step directory `step_dir` in `dir`/run.
std::string copy_into(const TempDir& dir, const std::string& step_dir) {
  const std::string copy = dir.file("run/" + fs::path(step_dir).filename().string());
  fs::create_directories(dir.file("run"));
  fs::copy(step_dir, copy);
  return copy;
}

// Waits until `path` holds `text`; false after 60 s.
bool wait_for_text(const std::string& path, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_text(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(zero_checkpoint)

BOOST_AUTO_TEST_CASE(a_sharded_checkpoint_resumes_bit_exactly_at_the_same_world_size) {
  const ZeroRun& saved = zero_run();
  const auto checkpoints = events(saved.run.log, "checkpoint");
  BOOST_TEST_REQUIRE(checkpoints.size() == 2u, saved.run.log);
  BOOST_TEST(json_field(checkpoints[0], "path") == saved.epoch1);
  const ProcessResult verify = run_alloy({"ckpt", "verify", saved.epoch1});
  BOOST_TEST(verify.exit_code == 0, verify.errors);
  const ckpt::Manifest manifest = ckpt::read_manifest(saved.epoch1);
  BOOST_TEST(manifest.world_size == 2);
  BOOST_TEST(manifest.kinds.size() == 3u);  // param, exp_avg, exp_avg_sq

  TempDir dir;
  const std::string copy = copy_into(dir, saved.epoch1);
  const TrainRun resumed =
      run_logged(dir, "resumed", job_args(dir.file("run"), 2, true, {"--resume", copy}));
  BOOST_TEST(resumed.digest() == saved.run.digest());

  // Saved asynchronously: the same checkpoints, the same end.
  TempDir async_dir;
  const TrainRun async = run_logged(
      async_dir, "async", job_args(async_dir.file("run"), 2, true, {"--async-checkpoint"}));
  BOOST_TEST(async.digest() == saved.run.digest());
  const std::string async_epoch1 = ckpt::sharded_checkpoint_dir(async_dir.file("run"), 67);
  BOOST_TEST(ckpt::read_manifest(async_epoch1).shards[1].crc == manifest.shards[1].crc);
  BOOST_TEST(events(async.log, "checkpoint").size() == 2u, async.log);
}

BOOST_AUTO_TEST_CASE(three_ranks_read_their_new_ranges_of_the_shards) {
  const ZeroRun& saved = zero_run();
  TempDir dir;
  const std::string copy = copy_into(dir, saved.epoch1);
  // The same checkpoint gathered into one plain file, which three sharded ranks cut up.
  const std::string plain = dir.file("plain/step-00000067.ckpt");
  fs::create_directories(dir.file("plain"));
  ckpt::write_checkpoint(plain, ckpt::read_any_checkpoint(copy));
  const TrainRun sharded =
      run_logged(dir, "sharded", job_args(dir.file("z3"), 3, true, {"--resume", copy}));
  const TrainRun from_plain =
      run_logged(dir, "from_plain", job_args(dir.file("p3"), 3, true, {"--resume", plain}));
  BOOST_TEST(!sharded.digest().empty());
  BOOST_TEST(sharded.digest() == from_plain.digest());
  const ckpt::Manifest three =
      ckpt::read_manifest(ckpt::sharded_checkpoint_dir(dir.file("z3"), 134));
  BOOST_TEST(three.world_size == 3);
  BOOST_TEST(three.shards[2].end - three.shards[2].begin < three.shards[0].end);  // uneven
  // One process, without sharding, gathers the whole checkpoint.
  const TrainRun one =
      run_logged(dir, "one", job_args(dir.file("one"), 1, false, {"--resume", copy}));
  BOOST_TEST(one.process.errors.find("resuming from " + copy) != std::string::npos,
             one.process.errors);
}

BOOST_AUTO_TEST_CASE(a_plain_checkpoint_resumes_with_zero) {
  TempDir dir;
  const TrainRun plain = run_logged(dir, "plain", job_args(dir.file("run"), 2, false));
  BOOST_TEST(plain.digest() == zero_run().run.digest());  // zero 1 trains as plain DDP does
  const std::string epoch1 = ckpt::checkpoint_path(dir.file("run"), 67);
  const TrainRun resumed =
      run_logged(dir, "resumed", job_args(dir.file("z2"), 2, true, {"--resume", epoch1}));
  BOOST_TEST(resumed.digest() == plain.digest());
}

BOOST_AUTO_TEST_CASE(a_rank_killed_in_a_sharded_save_restarts_from_the_save_before) {
  const ZeroRun& saved = zero_run();
  TempDir dir;
  const std::string log = dir.file("job.jsonl");
  const std::string run_dir = dir.file("run");
  int status = -1;
  {
    // Rank 1 stops before writing its shard of step 60; rank 0's is written by then.
    ::setenv("ALLOY_TEST_PAUSE_SHARD", "60 1", 1);
    BackgroundAlloy job(
        job_args(run_dir, 2, true,
                 {"--checkpoint-every", "20", "--max-restarts", "1", "--log-json", log}),
        dir.file("out"), dir.file("err"));
    ::unsetenv("ALLOY_TEST_PAUSE_SHARD");
    BOOST_TEST_REQUIRE(wait_for_text(dir.file("err"), "rank 1 pauses before its shard of step 60"),
                       read_text(dir.file("err")));
    const std::string step60 = ckpt::sharded_checkpoint_dir(run_dir, 60);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(step60 + "/rank-00000.ckpt") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    BOOST_TEST_REQUIRE(fs::exists(step60 + "/rank-00000.ckpt"));
    BOOST_TEST(!fs::exists(step60 + "/manifest"));
    const std::vector<pid_t> workers = workers_of(job.pid());
    BOOST_TEST_REQUIRE(workers.size() == 2u);
    BOOST_TEST_REQUIRE(::kill(workers[1], SIGKILL) == 0);
    status = job.wait();
  }
  const std::string errors = read_text(dir.file("err"));
  BOOST_TEST(status == 0, errors);
  const std::string text = read_text(log);
  const auto restarts = events(text, "restart");
  BOOST_TEST_REQUIRE(restarts.size() == 1u, text);
  BOOST_TEST(json_field(restarts[0], "checkpoint") == ckpt::sharded_checkpoint_dir(run_dir, 40));
  const auto end = events(text, "end");
  BOOST_TEST_REQUIRE(end.size() == 1u, text);
  BOOST_TEST(json_field(end[0], "params_digest") == saved.run.digest());
  // The save of step 60 was made again, whole.
  BOOST_TEST(run_alloy({"ckpt", "verify", ckpt::sharded_checkpoint_dir(run_dir, 60)}).exit_code ==
             0);
}

BOOST_AUTO_TEST_SUITE_END()
