// An asynchronous save of a sequence model that fails on the writer thread stops the run with an
// error naming the file, exit 1, and leaves no file behind. The directory is made read-only by a
// bind mount in a user and mount namespace (root ignores permission bits); without one the test
// is skipped (exit 77) with the reason.
#include <boost/test/unit_test.hpp>
#include <filesystem>

#include "tests/e2e/checkpoint_runs.h"
#include "tests/e2e/gpt_runs.h"

using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(gpt_read_only_checkpoint)

BOOST_AUTO_TEST_CASE(an_asynchronous_save_into_a_read_only_directory_fails_naming_the_file) {
  skip_without_user_namespaces("mounts a read-only directory in a user namespace");
  Corpus corpus;
  const std::string run_dir = corpus.dir.file("run");
  std::filesystem::create_directories(run_dir);
  std::string command = "\"$1\"";
  for (const std::string& word :
       with(tiny_gpt(corpus.path), {"--steps", "8", "--checkpoint-every", "4", "--checkpoint-dir",
                                    run_dir, "--async-checkpoint"})) {
    command += " '" + word + "'";
  }
  const std::string script =
      "mount --bind \"$2\" \"$2\" && mount -o remount,bind,ro \"$2\" || exit 99; " + command +
      " 2> \"$3/err\"; echo $? > \"$3/status\"";
  const ProcessResult shell = run_process(
      "/usr/bin/unshare",
      {"-Urm", "/bin/sh", "-c", script, "sh", alloy_binary(), run_dir, corpus.dir.path()});
  BOOST_TEST_REQUIRE(shell.exit_code == 0, "the namespace script failed: " << shell.errors);
  ProcessResult run;
  run.exit_code = std::stoi(read_text(corpus.dir.file("status")));
  run.errors = read_text(corpus.dir.file("err"));
  check_clean_failure(
      run, "cannot save checkpoint " + run_dir + "/step-00000004.ckpt: ", "Read-only file system");
  BOOST_TEST(std::filesystem::is_empty(run_dir));
}

BOOST_AUTO_TEST_SUITE_END()
