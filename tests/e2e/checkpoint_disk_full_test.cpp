// A save into a full filesystem: `alloy train` exits 1 with a message that names the checkpoint and
// the cause (ENOSPC), leaves no file under that name, and the newest earlier checkpoint verifies
// and resumes to the uninterrupted run's digest, with synchronous and asynchronous saves. The full
// disk is a small tmpfs mounted inside a user and mount namespace (unshare -Urm, no root needed),
// sized so that the first checkpoint fits and the second does not. Without unshare, or where the
// kernel refuses user namespaces, the test is skipped (exit 77) with the reason.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

namespace {

// One checkpoint of the quick MLP run is 1.6 MB (weights and momentum): 2500 KiB hold one,
// not a second beside it.
constexpr const char* kTmpfsSize = "2500k";

struct FullDiskRun {
  int status = -1;
  std::string errors;
  std::string listing;  // of the checkpoint directory after the run
};

// Trains one epoch with a checkpoint every 20 steps into a tmpfs at `dir`/mnt; copies the
// checkpoints left there to `dir`/kept.
FullDiskRun train_into_a_full_disk(const TempDir& dir, const std::vector<std::string>& more) {
  const std::string mount = dir.file("mnt");
  const std::string kept = dir.file("kept");
  std::filesystem::create_directories(mount);
  std::filesystem::create_directories(kept);
  std::string command = "\"$1\"";
  for (const std::string& word :
       quick_train_args({"--epochs", "1", "--checkpoint-dir", mount, "--checkpoint-every", "20",
                         "--keep-checkpoints", "1"})) {
    command += " '" + word + "'";
  }
  for (const std::string& word : more)
    command += " '" + word + "'";
  const std::string script = std::string("mount -t tmpfs -o size=") + kTmpfsSize +
                             " tmpfs \"$2\" || exit 99; " + command +
                             " 2> \"$3/err\"; echo $? > \"$3/status\"; ls \"$2\" > \"$3/listing\"; "
                             "cp \"$2\"/*.ckpt \"$3\"/ 2> /dev/null; true";
  const ProcessResult shell = run_process(
      "/usr/bin/unshare", {"-Urm", "/bin/sh", "-c", script, "sh", alloy_binary(), mount, kept});
  BOOST_TEST_REQUIRE(shell.exit_code == 0, "the namespace script failed: " << shell.errors);
  FullDiskRun run;
  run.status = std::stoi(read_text(kept + "/status"));
  run.errors = read_text(kept + "/err");
  run.listing = read_text(kept + "/listing");
  return run;
}

void check_full_disk(const std::vector<std::string>& more) {
  TempDir dir;
  const FullDiskRun run = train_into_a_full_disk(dir, more);
  BOOST_TEST_MESSAGE(run.errors);
  BOOST_TEST(run.status == 1);
  const std::string second = dir.file("mnt") + "/step-00000040.ckpt";
  BOOST_TEST(
      run.errors.find("alloy: error: cannot save checkpoint " + second + ": ") != std::string::npos,
      run.errors);
  BOOST_TEST(run.errors.find("No space left on device") != std::string::npos, run.errors);
  // Only the first checkpoint: no partial or temporary file.
  BOOST_TEST(run.listing == "step-00000020.ckpt\n");

  const std::string first = dir.file("kept") + "/step-00000020.ckpt";
  const ProcessResult verify = run_alloy({"ckpt", "verify", first});
  BOOST_TEST(verify.exit_code == 0, verify.errors);
  const TrainRun resumed =
      run_logged(dir, "resumed", quick_train_args({"--epochs", "1", "--resume", first}));
  const TrainRun straight = run_logged(dir, "straight", quick_train_args({"--epochs", "1"}));
  BOOST_TEST(!straight.digest().empty());
  BOOST_TEST(resumed.digest() == straight.digest());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint_disk_full)

BOOST_AUTO_TEST_CASE(a_synchronous_save_into_a_full_disk_fails_naming_the_file) {
  skip_without_user_namespaces("mounts a tmpfs in a user namespace");
  check_full_disk({});
}

BOOST_AUTO_TEST_CASE(an_asynchronous_save_into_a_full_disk_fails_naming_the_file) {
  skip_without_user_namespaces("mounts a tmpfs in a user namespace");
  check_full_disk({"--async-checkpoint"});
}

BOOST_AUTO_TEST_SUITE_END()
