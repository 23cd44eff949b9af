// `alloy train --allow-tf32` end to end on short MLP runs on the CPU: the help lists it (a no-op
// on the CPU), as `alloy mem` and `alloy eval` do; the start event says whether it is on; on the
// CPU it changes no bit; a checkpoint carries it, so a resume without the flag keeps it on, and
// --allow-tf32=false turns it off; a bad value is a usage error naming the flag. (What it does
// on CUDA: tests/core/ops/allow_tf32_gpu_test.cpp.)
#include <boost/test/unit_test.hpp>
#include <string>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(allow_tf32_e2e)

BOOST_AUTO_TEST_CASE(the_help_of_train_mem_and_eval_lists_it) {
  for (const char* command : {"train", "mem", "eval"}) {
    const ProcessResult help = run_alloy({command, "--help"});
    BOOST_TEST_REQUIRE(help.exit_code == 0, help.errors);
    // The help wraps its lines: compare with single spaces.
    std::string text;
    for (const char c : help.output) {
      const bool space = c == ' ' || c == '\n';
      if (!space || (!text.empty() && text.back() != ' ')) text += space ? ' ' : c;
    }
    const std::size_t at = text.find("--allow-tf32");
    BOOST_TEST_REQUIRE(at != std::string::npos, command << ": " << text);
    BOOST_TEST(text.find("no-op on the CPU", at) != std::string::npos,
               command << ": " << text.substr(at));
  }
  check_usage_error(quick_train_args({"--allow-tf32=maybe"}), "allow-tf32");
}

BOOST_AUTO_TEST_CASE(the_start_event_names_it_and_the_cpu_ignores_it) {
  const TempDir dir;
  const TrainRun plain = run_quick(dir, "plain", {"--epochs", "1"});
  const TrainRun tf32 = run_quick(dir, "tf32", {"--epochs", "1", "--allow-tf32"});
  BOOST_TEST(last_field(plain, "start", "allow_tf32") == "false");
  BOOST_TEST(last_field(tf32, "start", "allow_tf32") == "true");
  BOOST_TEST(!plain.digest().empty());
  BOOST_TEST(tf32.digest() == plain.digest(), "the CPU computes fp32 in fp32 either way");
  const ProcessResult mem =
      run_alloy({"mem", "--model", "mlp", "--batch-size", "8", "--device", "cpu", "--steps", "1",
                 "--opt-levels", "O0", "--threads", "1", "--allow-tf32"});
  BOOST_TEST(mem.exit_code == 0, mem.errors);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_carries_it) {
  const TempDir dir;
  const std::string checkpoints = dir.file("run");
  run_quick(dir, "first", {"--epochs", "1", "--allow-tf32", "--checkpoint-dir", checkpoints});
  const std::string saved = checkpoints + "/step-00000050.ckpt";
  const TrainRun resumed = run_quick(dir, "resumed", {"--epochs", "2", "--resume", saved});
  BOOST_TEST(last_field(resumed, "start", "allow_tf32") == "true");
  const TrainRun off =
      run_quick(dir, "off", {"--epochs", "2", "--resume", saved, "--allow-tf32=false"});
  BOOST_TEST(last_field(off, "start", "allow_tf32") == "false");

  // A checkpoint saved without it resumes with it off.
  const std::string plain_dir = dir.file("plain");
  run_quick(dir, "plain", {"--epochs", "1", "--checkpoint-dir", plain_dir});
  const TrainRun plain_resumed = run_quick(
      dir, "plain-resumed", {"--epochs", "2", "--resume", plain_dir + "/step-00000050.ckpt"});
  BOOST_TEST(last_field(plain_resumed, "start", "allow_tf32") == "false");

  const ProcessResult eval =
      run_alloy({"eval", "--checkpoint", saved, "--device", "cpu", "--allow-tf32=false"});
  BOOST_TEST(eval.exit_code == 0, eval.errors);
}

BOOST_AUTO_TEST_SUITE_END()
