// `alloy train --ema-decay D` end to end on short MLP runs over the synthetic set: the start
// event names the decay; every epoch event, and the end event, carry test_acc_ema; the averages
// change no bit of the training (the same params_digest as without them); a checkpoint carries
// them, so a resumed run reports the straight run's test_acc_ema to the last digit and `alloy
// eval` the same figure; a resume given --ema-decay 0 drops them with a warning; two ranks
// report them; bad values are usage errors naming the flag; `alloy mem --ema-decay` counts them;
// `alloy ckpt export --ema` writes them under the weights' names.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"
#include "tests/parallel/forked.h"
#include "tests/support/process.h"

using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(ema_e2e)

BOOST_AUTO_TEST_CASE(averages_are_reported_and_change_no_bit_of_training) {
  const TempDir dir;
  const TrainRun averaged = run_quick(dir, "averaged", {"--epochs", "2", "--ema-decay", "0.9"});
  const TrainRun plain = run_quick(dir, "plain", {"--epochs", "2"});
  BOOST_TEST(last_field(averaged, "start", "ema_decay") == "0.9");
  BOOST_TEST(last_field(averaged, "start", "ema_warmup") == "false");
  const auto epochs = events(averaged.log, "epoch");
  BOOST_TEST_REQUIRE(epochs.size() == 2u);
  for (const std::string& epoch : epochs) {
    const double accuracy = std::stod(json_field(epoch, "test_acc_ema"));
    BOOST_TEST(accuracy > 0.2);  // ten classes: well above chance after an epoch
    BOOST_TEST(accuracy <= 1.0);
  }
  BOOST_TEST(last_field(averaged, "end", "test_acc_ema") ==
             json_field(epochs.back(), "test_acc_ema"));
  BOOST_TEST(averaged.process.output.find("test_acc_ema") != std::string::npos);
  BOOST_TEST(averaged.digest() == plain.digest(), "the averages must not touch the weights");
  BOOST_TEST(last_field(plain, "start", "ema_decay").empty());
  BOOST_TEST(last_field(plain, "epoch", "test_acc_ema").empty());
  BOOST_TEST(plain.process.output.find("test_acc_ema") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_carries_the_averages) {
  const TempDir dir;
  const std::string checkpoints = dir.file("run");
  // At decay 0.99 the averages of 50 steps remember the start: restarting them from the
  // weights at the checkpoint would change the second epoch's figure.
  // With warm-up, which the checkpoint carries too (resumed without it, the second epoch's
  // averages would move at a constant 0.99 instead of the warmed-up decay's last values).
  run_quick(
      dir, "first",
      {"--epochs", "1", "--ema-decay", "0.99", "--ema-warmup", "--checkpoint-dir", checkpoints});
  const std::string saved = checkpoints + "/step-00000050.ckpt";
  const TrainRun resumed = run_quick(dir, "resumed", {"--epochs", "2", "--resume", saved});
  const TrainRun straight =
      run_quick(dir, "straight", {"--epochs", "2", "--ema-decay", "0.99", "--ema-warmup"});
  BOOST_TEST(last_field(resumed, "start", "ema_decay") == "0.99");
  BOOST_TEST(last_field(resumed, "start", "ema_warmup") == "true");
  BOOST_TEST(!last_field(straight, "epoch", "test_acc_ema").empty());
  BOOST_TEST(last_field(resumed, "epoch", "test_acc_ema") ==
             last_field(straight, "epoch", "test_acc_ema"));
  BOOST_TEST(resumed.digest() == straight.digest());

  // alloy eval reports the averages' accuracy of the file: epoch 1's figure.
  const TrainRun first{{}, read_text(dir.file("first.jsonl"))};
  const ProcessResult eval = run_alloy(
      {"eval", "--checkpoint", saved, "--device", "cpu", "--log-json", dir.file("eval.jsonl")});
  BOOST_TEST_REQUIRE(eval.exit_code == 0, eval.errors);
  const auto evaluated = events(read_text(dir.file("eval.jsonl")), "eval");
  BOOST_TEST_REQUIRE(evaluated.size() == 1u);
  BOOST_TEST(json_field(evaluated[0], "test_acc_ema") ==
             last_field(first, "epoch", "test_acc_ema"));

  // Given --ema-decay 0, the resume trains without them and says it drops them.
  const TrainRun off =
      run_quick(dir, "off", {"--epochs", "2", "--resume", saved, "--ema-decay", "0"});
  BOOST_TEST(last_field(off, "epoch", "test_acc_ema").empty());
  BOOST_TEST(off.process.errors.find("weight averages") != std::string::npos, off.process.errors);
}

BOOST_AUTO_TEST_CASE(two_ranks_report_the_averages) {
  const TempDir dir;
  const TrainRun two = run_quick(dir, "two",
                                 {"--epochs", "1", "--gpus", "2", "--ema-decay", "0.9",
                                  "--master-port", std::to_string(free_port())});
  const double accuracy = std::stod(last_field(two, "epoch", "test_acc_ema"));
  BOOST_TEST(accuracy > 0.2);
  BOOST_TEST(accuracy <= 1.0);
}

BOOST_AUTO_TEST_CASE(bad_values_are_usage_errors_naming_the_flag) {
  check_usage_error(quick_train_args({"--ema-decay", "1"}), "--ema-decay must be in [0, 1)");
  check_usage_error(quick_train_args({"--ema-decay", "-0.5"}), "--ema-decay");
  check_usage_error(quick_train_args({"--ema-decay", "0.9999999999"}), "--ema-decay");
  check_usage_error(quick_train_args({"--ema-decay", "nan"}), "--ema-decay");
  check_usage_error(quick_train_args({"--ema-warmup"}),
                    "--ema-warmup warms up the weight averages");
  check_usage_error({"mem", "--model", "mlp", "--batch-size", "8", "--ema-decay", "2"},
                    "--ema-decay");
  const ProcessResult help = run_alloy({"train", "--help"});
  BOOST_TEST(help.output.find("--ema-decay") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(mem_counts_the_averages_as_optimizer_state) {
  const auto optimizer_state = [](const std::string& json) {
    const std::string key = "\"optimizer_state_bytes\":";
    const std::size_t at = json.find(key);
    BOOST_TEST_REQUIRE(at != std::string::npos, json);
    return std::stoll(json.substr(at + key.size()));
  };
  const std::vector<std::string> mem = {"mem", "--model",   "mlp", "--batch-size", "8",  "--device",
                                        "cpu", "--steps",   "1",   "--opt-levels", "O0", "--json",
                                        "-",   "--threads", "1"};
  std::vector<std::string> averaged = mem;
  averaged.insert(averaged.end(), {"--ema-decay", "0.99"});
  const ProcessResult plain_run = run_alloy(mem);
  const ProcessResult averaged_run = run_alloy(averaged);
  BOOST_TEST_REQUIRE(plain_run.exit_code == 0, plain_run.errors);
  BOOST_TEST_REQUIRE(averaged_run.exit_code == 0, averaged_run.errors);
  // The MLP's 784 * 256 + 256 + 256 * 10 + 10 fp32 weights, once more.
  const long long weights = (784LL * 256 + 256 + 256 * 10 + 10) * 4;
  BOOST_TEST(optimizer_state(averaged_run.output) - optimizer_state(plain_run.output) == weights);
  BOOST_TEST(averaged_run.output.find("\"ema_decay\":0.99") != std::string::npos);
}

// `alloy ckpt export --ema` writes the averages under the weights' names, marked in the metadata;
// a checkpoint without averages is an error naming it.
BOOST_AUTO_TEST_CASE(ckpt_export_writes_the_averages_under_the_weights_names) {
  const TempDir dir;
  run_quick(dir, "averaged",
            {"--epochs", "1", "--ema-decay", "0.9", "--checkpoint-dir", dir.file("averaged")});
  run_quick(dir, "plain", {"--epochs", "1", "--checkpoint-dir", dir.file("plain")});
  const std::string averaged = dir.file("averaged") + "/step-00000050.ckpt";
  const auto header_of = [](const std::string& file) {
    const std::string bytes = read_text(file);
    BOOST_TEST_REQUIRE(bytes.size() > 8u);
    std::uint64_t length = 0;
    for (int i = 7; i >= 0; --i)
      length = (length << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
    return bytes.substr(8, length);
  };
  const auto names_of = [](const std::string& header) {
    std::vector<std::string> names;
    for (std::size_t at = header.find("\":{\"dtype\""); at != std::string::npos;
         at = header.find("\":{\"dtype\"", at + 1)) {
      const std::size_t begin = header.rfind('"', at - 1) + 1;
      names.push_back(header.substr(begin, at - begin));
    }
    return names;
  };
  const ProcessResult weights =
      run_alloy({"ckpt", "export", averaged, "--safetensors", dir.file("weights.safetensors")});
  const ProcessResult averages = run_alloy(
      {"ckpt", "export", averaged, "--safetensors", dir.file("ema.safetensors"), "--ema"});
  BOOST_TEST_REQUIRE(weights.exit_code == 0, weights.errors);
  BOOST_TEST_REQUIRE(averages.exit_code == 0, averages.errors);
  const std::string weights_header = header_of(dir.file("weights.safetensors"));
  const std::string averages_header = header_of(dir.file("ema.safetensors"));
  BOOST_TEST(averages_header.find("\"weights\":\"ema\"") != std::string::npos, averages_header);
  BOOST_TEST(weights_header.find("\"weights\"") == std::string::npos, weights_header);
  BOOST_TEST(!names_of(weights_header).empty());
  BOOST_TEST(names_of(averages_header) == names_of(weights_header));
  BOOST_TEST(read_text(dir.file("ema.safetensors")) != read_text(dir.file("weights.safetensors")));

  const std::string plain = dir.file("plain") + "/step-00000050.ckpt";
  const ProcessResult none =
      run_alloy({"ckpt", "export", plain, "--safetensors", dir.file("none.safetensors"), "--ema"});
  BOOST_TEST(none.exit_code == 1, none.errors);
  BOOST_TEST(none.errors.find("holds no weight averages") != std::string::npos, none.errors);
  BOOST_TEST(none.errors.find(plain) != std::string::npos, none.errors);
  check_usage_error({"ckpt", "info", averaged, "--ema"}, "--ema applies to export only");
}

BOOST_AUTO_TEST_SUITE_END()
