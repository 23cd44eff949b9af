// --accumulation-steps end to end: `alloy train` splits each step's batch into micro-batches
// (the start event and line say so) and learns as well as without; a value below 1 or one
// that does not divide a rank's share of the batch is a usage error naming the flag, from the
// command line, a config file or the launcher; a resumed run keeps the checkpoint's value and
// continues bit-exactly; and `alloy mem --accumulation-steps 4` shows the activations of a
// quarter of the batch.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

namespace {

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

double number(const std::string& line, const std::string& key) {
  const std::string text = json_field(line, key);
  BOOST_TEST_REQUIRE(!text.empty(), "no " << key << " in " << line);
  return std::atof(text.c_str());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(accumulation)

BOOST_AUTO_TEST_CASE(four_micro_batches_learn_like_one_pass) {
  const ProcessResult split = run_alloy(quick_train_args(
      {"--epochs", "1", "--batch-size", "256", "--accumulation-steps", "4", "--log-json", "-"}));
  BOOST_TEST_REQUIRE(split.exit_code == 0, split.errors);
  const auto starts = events(split.output, "start");
  BOOST_TEST_REQUIRE(starts.size() == 1u, split.output);
  BOOST_TEST(json_field(starts[0], "accumulation_steps") == "4");
  BOOST_TEST(json_field(starts[0], "batch_size") == "256");
  // With the log on standard output, the human lines go to standard error.
  BOOST_TEST(split.errors.find("| batch 256 (4 x 64) |") != std::string::npos, split.errors);
  const auto split_epochs = events(split.output, "epoch");
  BOOST_TEST_REQUIRE(split_epochs.size() == 1u);
  BOOST_TEST(json_field(split_epochs[0], "step") == "50");  // 12800 / 256: steps are the batch's

  const ProcessResult whole =
      run_alloy(quick_train_args({"--epochs", "1", "--batch-size", "256", "--log-json", "-"}));
  BOOST_TEST_REQUIRE(whole.exit_code == 0, whole.errors);
  BOOST_TEST(json_field(events(whole.output, "start").at(0), "accumulation_steps") == "1");
  BOOST_TEST(whole.errors.find("| batch 256 |") != std::string::npos, whole.errors);
  const auto whole_epochs = events(whole.output, "epoch");
  BOOST_TEST_REQUIRE(whole_epochs.size() == 1u);

  const double split_acc = number(split_epochs[0], "test_acc");
  const double whole_acc = number(whole_epochs[0], "test_acc");
  const double split_loss = number(split_epochs[0], "train_loss");
  const double whole_loss = number(whole_epochs[0], "train_loss");
  BOOST_TEST_MESSAGE("test_acc " << split_acc << " in 4 micro-batches, " << whole_acc
                                 << " in one pass; train_loss " << split_loss << ", "
                                 << whole_loss);
  BOOST_TEST(whole_acc > 0.5, "the run without accumulation did not learn");
  BOOST_TEST(std::abs(split_acc - whole_acc) <= 0.02);
  BOOST_TEST(std::abs(split_loss - whole_loss) <= 0.02 * whole_loss);
  BOOST_TEST(json_field(events(split.output, "end").at(0), "params_digest") !=
             json_field(events(whole.output, "end").at(0), "params_digest"));
}

BOOST_AUTO_TEST_CASE(bad_values_are_usage_errors_naming_the_flag) {
  check_usage_error(quick_train_args({"--accumulation-steps", "0"}),
                    "--accumulation-steps must be at least 1, got 0");
  check_usage_error(quick_train_args({"--batch-size", "100", "--accumulation-steps", "3"}),
                    "--accumulation-steps 3");
  // The launcher answers for its workers, before starting any.
  check_usage_error(quick_train_args({"--gpus", "2", "--accumulation-steps", "3"}),
                    "--batch-size 256 over 2 ranks is 128 examples per rank, which "
                    "--accumulation-steps 3 does not divide");
  const TempDir dir;
  const std::string config = dir.file("run.cfg");
  std::ofstream(config) << "accumulation-steps 0\n";
  check_usage_error(quick_train_args({"--config", config}), "--accumulation-steps");
  const ProcessResult help = run_alloy({"train", "--help"});
  BOOST_TEST(help.output.find("--accumulation-steps") != std::string::npos);
}

// The checkpoint keeps the flag: resumed without it, the run goes on in 4 micro-batches and
// ends with the bits of the run that was never stopped.
BOOST_AUTO_TEST_CASE(a_resumed_run_keeps_the_checkpoints_accumulation_steps) {
  const TempDir dir;
  const std::vector<std::string> flags = {"--batch-size", "256", "--accumulation-steps", "4"};
  const TrainRun straight =
      run_logged(dir, "straight", quick_train_args(with(flags, {"--epochs", "2"})));
  const std::string run_dir = dir.file("run");
  run_logged(dir, "first",
             quick_train_args(with(flags, {"--epochs", "1", "--checkpoint-dir", run_dir})));
  const TrainRun second =
      run_logged(dir, "second", quick_train_args({"--epochs", "2", "--resume", run_dir}));
  BOOST_TEST(json_field(events(second.log, "start").at(0), "accumulation_steps") == "4");
  BOOST_TEST(second.digest() == straight.digest());
  BOOST_TEST(second.train_loss(2) == straight.train_loss(2));
  // A flag given wins over the checkpoint's.
  const TrainRun other = run_logged(
      dir, "other",
      quick_train_args({"--epochs", "2", "--resume", run_dir, "--accumulation-steps", "2"}));
  BOOST_TEST(json_field(events(other.log, "start").at(0), "accumulation_steps") == "2");
}

BOOST_AUTO_TEST_CASE(mem_shows_the_activations_of_a_micro_batch) {
  const auto measure = [](const std::string& steps) {
    const ProcessResult result = run_alloy(
        {"mem", "--model", "lenet", "--batch-size", "256", "--accumulation-steps", steps,
         "--device", "cpu", "--opt-levels", "O0", "--steps", "1", "--threads", "1", "--json", "-"});
    BOOST_TEST_REQUIRE(result.exit_code == 0, result.errors);
    return result;
  };
  const ProcessResult split = measure("4");
  const ProcessResult whole = measure("1");
  BOOST_TEST(split.errors.find("batch 256 (4 micro-batches of 64)") != std::string::npos,
             split.errors);
  const std::string split_json = lines_of(split.output).at(0);
  const std::string whole_json = lines_of(whole.output).at(0);
  BOOST_TEST(json_field(split_json, "accumulation_steps") == "4");
  BOOST_TEST(json_field(split_json, "micro_batch_size") == "64");
  const double split_activations = number(split_json, "activations_bytes");
  const double whole_activations = number(whole_json, "activations_bytes");
  BOOST_TEST_MESSAGE("activations " << split_activations << " bytes in 4 micro-batches, "
                                    << whole_activations << " in one pass");
  BOOST_TEST(split_activations < 0.5 * whole_activations);
  BOOST_TEST(number(split_json, "peak_bytes") < number(whole_json, "peak_bytes"));
  check_usage_error({"mem", "--model", "lenet", "--batch-size", "256", "--accumulation-steps", "3",
                     "--device", "cpu"},
                    "--accumulation-steps 3");
}

BOOST_AUTO_TEST_SUITE_END()
