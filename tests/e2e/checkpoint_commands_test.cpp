// The checkpoint commands on good and damaged files: `alloy ckpt info`, `verify`, `eval
// --checkpoint` and `train --resume` agree with the run that wrote the file, and every damaged
// input - empty, truncated, a flipped byte, wrong magic, a newer format version, another model's
// checkpoint, a directory without checkpoints - gives exit status 1 and one error line that names
// the file and what is wrong, never a crash.
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <fstream>

#include "core/checkpoint/checkpoint_file.h"
#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;
namespace ckpt = alloy::checkpoint;

namespace {

// One short run that saved a checkpoint at its end, shared by the tests of this file.
struct SavedRun {
  TempDir dir;
  std::string path;
  TrainRun run;
  SavedRun() {
    run = run_logged(dir, "train",
                     quick_train_args({"--epochs", "1", "--opt-level", "O2", "--checkpoint-dir",
                                       dir.file("run")}));
    path = ckpt::checkpoint_path(dir.file("run"), 50);
  }
};

const SavedRun& saved_run() {
  static SavedRun run;
  return run;
}

std::string bytes_of(const std::string& path) {
  return read_text(path);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct Damaged {
  std::string name;
  std::string bytes;
  std::string reason;
};

std::vector<Damaged> damaged_copies(const std::string& good) {
  std::string flipped = good;
  flipped[good.size() / 2] = static_cast<char>(flipped[good.size() / 2] ^ 0x40);
  std::string magic = good;
  magic[0] = 'X';
  std::string newer = good;
  newer[8] = 2;  // the format version's low byte
  return {
      {"empty.ckpt", "", "empty file"},
      {"truncated.ckpt", good.substr(0, good.size() / 2), "truncated"},
      {"short.ckpt", good.substr(0, 10), "truncated header"},
      {"flipped.ckpt", flipped, "CRC mismatch"},
      {"magic.ckpt", magic, "not an Alloy checkpoint"},
      {"newer.ckpt", newer, "newer Alloy: format version 2"},
  };
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_commands)

BOOST_AUTO_TEST_CASE(info_verify_and_eval_agree_with_the_run) {
  const SavedRun& saved = saved_run();
  const std::string digest = saved.run.digest();
  const auto epoch = events(saved.run.log, "epoch");
  BOOST_TEST_REQUIRE(epoch.size() == 1u);

  const ProcessResult info = run_alloy({"ckpt", "info", "--json", saved.path});
  BOOST_TEST_REQUIRE(info.exit_code == 0, info.errors);
  BOOST_TEST(json_field(info.output, "params_digest") == digest);
  BOOST_TEST(json_field(info.output, "model") == "mlp");
  BOOST_TEST(json_field(info.output, "opt_level") == "O2");
  BOOST_TEST(json_field(info.output, "step") == "50");
  BOOST_TEST(json_field(info.output, "epoch") == "1");
  BOOST_TEST(json_field(info.output, "loss_scale") == json_field(epoch[0], "loss_scale"));
  BOOST_TEST(json_field(info.output, "format_version") == "1");

  const ProcessResult human = run_alloy({"ckpt", "info", saved.path});
  BOOST_TEST(human.exit_code == 0, human.errors);
  BOOST_TEST(human.output.find("params_digest " + digest) != std::string::npos, human.output);

  const ProcessResult verify = run_alloy({"ckpt", "verify", saved.path});
  BOOST_TEST(verify.exit_code == 0, verify.errors);
  BOOST_TEST(verify.output.find(": ok") != std::string::npos, verify.output);

  // On the CPU, where the run was trained: its test accuracy, to the last example.
  const ProcessResult eval =
      run_alloy({"eval", "--checkpoint", saved.path, "--device", "cpu", "--log-json", "-"});
  BOOST_TEST_REQUIRE(eval.exit_code == 0, eval.errors);
  const auto result = events(eval.output, "eval");
  BOOST_TEST_REQUIRE(result.size() == 1u, eval.output);
  BOOST_TEST(json_field(result[0], "test_acc") == json_field(epoch[0], "test_acc"));
  BOOST_TEST(json_field(result[0], "params_digest") == digest);
}

BOOST_AUTO_TEST_CASE(damaged_files_fail_cleanly_everywhere) {
  const SavedRun& saved = saved_run();
  const std::string good = bytes_of(saved.path);
  TempDir dir;
  for (const Damaged& damaged : damaged_copies(good)) {
    const std::string path = dir.file(damaged.name);
    write_bytes(path, damaged.bytes);
    const std::vector<std::vector<std::string>> commands = {
        {"ckpt", "verify", path},
        {"ckpt", "info", "--json", path},
        {"ckpt", "export", path, "--safetensors", dir.file("out.safetensors")},
        {"eval", "--checkpoint", path},
        quick_train_args({"--epochs", "2", "--resume", path}),
    };
    for (const auto& command : commands) {
      BOOST_TEST_CONTEXT(damaged.name << ": alloy " << command[0] << " " << command[1]) {
        check_clean_failure(run_alloy(command), path, damaged.reason);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_another_model_is_refused) {
  const SavedRun& saved = saved_run();
  for (const std::string model : {"lenet", "resnet18"}) {
    check_clean_failure(run_alloy({"train", "--model", model, "--dataset", "synthetic", "--device",
                                   "cpu", "--resume", saved.path}),
                        saved.path, "holds model mlp, but this run builds " + model);
  }
}

BOOST_AUTO_TEST_CASE(directories_without_a_valid_checkpoint_are_refused) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("empty"));
  write_bytes(dir.file("empty/notes.txt"), "not a checkpoint");
  check_clean_failure(run_alloy(quick_train_args({"--resume", dir.file("empty")})),
                      dir.file("empty"), "no checkpoints in");
  check_clean_failure(run_alloy(quick_train_args({"--resume", dir.file("missing")})),
                      dir.file("missing"), "no such file");
}

BOOST_AUTO_TEST_CASE(a_directory_resumes_from_its_newest_valid_checkpoint) {
  const SavedRun& saved = saved_run();
  TempDir dir;
  const std::string run_dir = dir.file("run");
  const std::string good = bytes_of(saved.path);
  write_bytes(ckpt::checkpoint_path(run_dir, 50), good);
  const std::string newest = ckpt::checkpoint_path(run_dir, 60);
  write_bytes(newest, good.substr(0, good.size() - 7));  // a save cut short
  write_bytes(run_dir + "/step-00000070.ckpt.tmp-123", "an interrupted save's temporary");
  const TrainRun resumed =
      run_logged(dir, "resumed", quick_train_args({"--epochs", "1", "--resume", run_dir}));
  const std::string& errors = resumed.process.errors;
  BOOST_TEST(errors.find("warning: checkpoint " + newest + ": truncated") != std::string::npos,
             errors);
  BOOST_TEST(
      errors.find("resuming from " + ckpt::checkpoint_path(run_dir, 50)) != std::string::npos,
      errors);
  BOOST_TEST(resumed.digest() == saved.run.digest());  // nothing left to train

  write_bytes(ckpt::checkpoint_path(run_dir, 50), "");
  check_clean_failure(run_alloy(quick_train_args({"--resume", run_dir})), run_dir,
                      "no valid checkpoints");
}

BOOST_AUTO_TEST_SUITE_END()
