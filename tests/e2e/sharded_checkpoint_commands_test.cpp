// Sharded checkpoints through the commands: a plain checkpoint of a short run, rewritten as the
// shards and manifest of 3 ranks, is described by `alloy ckpt info`, passes `verify`, exports
// the same safetensors bytes, evaluates to the same accuracy and resumes (one process, no
// sharding) to the digest of the run never stopped; damaged shards and manifests fail `verify`
// with exit status 1 and one error line naming the file.
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "core/checkpoint/checkpoint_file.h"
#include "tests/core/checkpoint/sharded_files.h"
#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;
namespace fs = std::filesystem;

namespace {

// Two epochs with a checkpoint at the end of each; step 50's rewritten as 3 shards.
struct ShardedRun {
  TempDir dir;
  TrainRun run;
  std::string plain;
  std::string sharded;
  ShardedRun() {
    run = run_logged(dir, "train",
                     quick_train_args({"--epochs", "2", "--opt-level", "O2", "--checkpoint-dir",
                                       dir.file("run")}));
    plain = ckpt::checkpoint_path(dir.file("run"), 50);
    sharded = ckpt::sharded_checkpoint_dir(dir.file("sharded"), 50);
    ckpt::test::write_sharded_state(sharded, ckpt::read_checkpoint(plain), 3);
  }
};

const ShardedRun& sharded_run() {
  static ShardedRun run;
  return run;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A copy of the sharded checkpoint in a fresh directory, to damage.
std::string copy_of(const TempDir& dir, const ShardedRun& saved) {
  const std::string copy = dir.file("step-00000050");
  fs::copy(saved.sharded, copy);
  return copy;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sharded_checkpoint_commands)

BOOST_AUTO_TEST_CASE(info_verify_export_and_eval_read_the_shards) {
  const ShardedRun& saved = sharded_run();
  const std::string digest =
      json_field(run_alloy({"ckpt", "info", "--json", saved.plain}).output, "params_digest");
  BOOST_TEST_REQUIRE(!digest.empty());

  const ProcessResult json = run_alloy({"ckpt", "info", "--json", saved.sharded});
  BOOST_TEST_REQUIRE(json.exit_code == 0, json.errors);
  BOOST_TEST(json_field(json.output, "sharded") == "true");
  BOOST_TEST(json_field(json.output, "world_size") == "3");
  BOOST_TEST(json_field(json.output, "step") == "50");
  BOOST_TEST(json_field(json.output, "params_digest") == digest);
  BOOST_TEST(has(json.output, "\"kinds\":[\"param f32\",\"momentum_buffer f32\"]"), json.output);
  BOOST_TEST(has(json.output, "rank-00002.ckpt ["), json.output);

  const ProcessResult human = run_alloy({"ckpt", "info", saved.sharded + "/manifest"});
  BOOST_TEST_REQUIRE(human.exit_code == 0, human.errors);
  BOOST_TEST(has(human.output, "sharded: world size 3"), human.output);
  BOOST_TEST(has(human.output, "rank 1: rank-00001.ckpt ["), human.output);
  BOOST_TEST(has(human.output, "kinds: param f32 momentum_buffer f32"), human.output);

  const ProcessResult verify = run_alloy({"ckpt", "verify", saved.sharded});
  BOOST_TEST(verify.exit_code == 0, verify.errors);
  BOOST_TEST(has(verify.output, ": ok (sharded: 3 shards"), verify.output);
  BOOST_TEST(has(verify.output, "params_digest " + digest), verify.output);

  TempDir out;
  const ProcessResult plain_export =
      run_alloy({"ckpt", "export", saved.plain, "--safetensors", out.file("plain.safetensors")});
  const ProcessResult sharded_export = run_alloy(
      {"ckpt", "export", saved.sharded, "--safetensors", out.file("sharded.safetensors")});
  BOOST_TEST_REQUIRE(plain_export.exit_code == 0, plain_export.errors);
  BOOST_TEST_REQUIRE(sharded_export.exit_code == 0, sharded_export.errors);
  BOOST_TEST(read_text(out.file("plain.safetensors")) ==
             read_text(out.file("sharded.safetensors")));

  const auto eval = [](const std::string& path) {
    const ProcessResult result =
        run_alloy({"eval", "--checkpoint", path, "--device", "cpu", "--log-json", "-"});
    BOOST_TEST_REQUIRE(result.exit_code == 0, result.errors);
    return json_field(events(result.output, "eval").at(0), "test_acc");
  };
  BOOST_TEST(eval(saved.sharded) == eval(saved.plain));
}

BOOST_AUTO_TEST_CASE(a_single_process_resumes_from_the_shards_to_the_uninterrupted_digest) {
  const ShardedRun& saved = sharded_run();
  TempDir dir;
  const TrainRun resumed =
      run_logged(dir, "resumed", quick_train_args({"--epochs", "2", "--resume", saved.sharded}));
  BOOST_TEST(has(resumed.process.errors, "resuming from " + saved.sharded), resumed.process.errors);
  BOOST_TEST(resumed.digest() == saved.run.digest());
  // A directory of checkpoints takes the sharded one like a file.
  fs::create_directories(dir.file("run"));
  fs::copy(saved.sharded, dir.file("run/step-00000050"));
  const TrainRun from_dir =
      run_logged(dir, "from_dir", quick_train_args({"--epochs", "2", "--resume", dir.file("run")}));
  BOOST_TEST(from_dir.digest() == saved.run.digest());
}

BOOST_AUTO_TEST_CASE(damaged_shards_and_manifests_fail_verify_naming_the_file) {
  const ShardedRun& saved = sharded_run();
  const ckpt::Manifest manifest = ckpt::read_manifest(saved.sharded);
  {
    TempDir dir;
    const std::string copy = copy_of(dir, saved);
    const std::string shard = copy + "/rank-00001.ckpt";
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(manifest.shards[1].sections[0].offset + 9));
    file.put('\x7f');
    file.close();
    check_clean_failure(run_alloy({"ckpt", "verify", copy}), shard, "corrupt: CRC mismatch");
    // Resuming reads the damaged range too.
    check_clean_failure(run_alloy(quick_train_args({"--epochs", "2", "--resume", copy})), shard,
                        "CRC mismatch in param chunk 0");
  }
  {
    TempDir dir;
    const std::string copy = copy_of(dir, saved);
    const std::string shard = copy + "/rank-00002.ckpt";
    fs::resize_file(shard, manifest.shards[2].bytes - 1);
    check_clean_failure(run_alloy({"ckpt", "verify", copy}), shard, "truncated");
  }
  {
    TempDir dir;
    const std::string copy = copy_of(dir, saved);
    fs::remove(copy + "/rank-00000.ckpt");
    check_clean_failure(run_alloy({"ckpt", "verify", copy}), copy + "/rank-00000.ckpt",
                        "missing shard of rank 0");
    fs::remove(copy + "/manifest");
    check_clean_failure(run_alloy({"ckpt", "verify", copy}), copy + "/manifest", "no manifest");
    check_clean_failure(run_alloy({"ckpt", "info", copy}), copy + "/manifest", "no manifest");
  }
  {
    // Shards that tile the flat space, but not as 3 ranks own it.
    TempDir dir;
    const std::string step_dir = dir.file("step-00000050");
    ckpt::test::write_sharded_state(step_dir, ckpt::read_checkpoint(saved.plain), 3,
                                    ckpt::kDefaultChunkElements,
                                    {10, manifest.total - 10, manifest.total});
    check_clean_failure(run_alloy({"ckpt", "verify", step_dir}), step_dir,
                        "shard rank-00000.ckpt holds [0, 10), but rank 0 of 3 owns [0, " +
                            std::to_string(manifest.shards[0].end) + ")");
  }
}

BOOST_AUTO_TEST_SUITE_END()
