// `alloy train` at every opt level end to end: O1, O2 and O3 learn as well as O0, the epoch events
// carry loss_scale and skipped_steps, and a loss scale forced far too high backs off through a
// bounded number of skipped steps with a rate-limited warning naming the gradient that overflowed,
// then trains on. Short MLP runs on the synthetic set keep it fast; the full LeNet/Fashion-MNIST
// figures are in docs/PERFORMANCE.md.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"
#include "tests/support/process.h"

using namespace alloy::test;

namespace {

struct AmpRun {
  double test_acc = 0;
  double loss_scale = 0;
  long skipped_steps = 0;
  std::string errors;  // stderr: warnings
};

AmpRun train_at(const TempDir& dir, const std::string& name, const std::vector<std::string>& amp) {
  const std::string log = dir.file(name + ".json");
  std::vector<std::string> extra = {"--epochs", "1", "--lr", "0.05", "--log-json", log};
  extra.insert(extra.end(), amp.begin(), amp.end());
  const ProcessResult result = run_alloy(quick_train_args(extra));
  BOOST_TEST_REQUIRE(result.exit_code == 0, name << ": " << result.errors);
  const auto epochs = events(read_text(log), "epoch");
  BOOST_TEST_REQUIRE(epochs.size() == 1u, name);
  AmpRun run;
  run.test_acc = std::stod(json_field(epochs[0], "test_acc"));
  run.loss_scale = std::stod(json_field(epochs[0], "loss_scale"));
  run.skipped_steps = std::stol(json_field(epochs[0], "skipped_steps"));
  run.errors = result.errors;
  return run;
}

std::size_t count_of(const std::string& text, const std::string& word) {
  std::size_t count = 0;
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    ++count;
  }
  return count;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(amp_train)

BOOST_AUTO_TEST_CASE(every_opt_level_learns_like_fp32) {
  TempDir dir;
  const AmpRun o0 = train_at(dir, "o0", {"--opt-level", "O0"});
  BOOST_TEST(o0.test_acc > 0.5);
  BOOST_TEST(o0.loss_scale == 1.0);
  for (const std::string level : {"O1", "O2", "O3"}) {
    const AmpRun run = train_at(dir, level, {"--opt-level", level});
    BOOST_TEST(std::fabs(run.test_acc - o0.test_acc) <= 0.02,
               level << " test_acc " << run.test_acc << " vs O0 " << o0.test_acc);
    // O1 and O2 default to the dynamic scaler (2^16, no overflow here); O3 to a static 1.
    BOOST_TEST(run.loss_scale == (level == "O3" ? 1.0 : 65536.0), level);
    BOOST_TEST(run.skipped_steps == 0, level);
  }
  const AmpRun bf16 = train_at(dir, "o2_bf16", {"--opt-level", "O2", "--half-dtype", "bf16"});
  BOOST_TEST(std::fabs(bf16.test_acc - o0.test_acc) <= 0.03, "bf16 " << bf16.test_acc);
  BOOST_TEST(bf16.loss_scale == 1.0);  // bf16 has fp32's range: no loss scaling by default
}

BOOST_AUTO_TEST_CASE(a_forced_overflow_backs_off_and_trains_on) {
  TempDir dir;
  const AmpRun normal = train_at(dir, "normal", {"--opt-level", "O2"});
  const std::string huge = "1099511627776";  // 2^40: every early gradient overflows fp16
  const AmpRun forced = train_at(
      dir, "forced", {"--opt-level", "O2", "--init-loss-scale", huge, "--max-loss-scale", huge});
  BOOST_TEST(forced.skipped_steps >= 10);
  BOOST_TEST(forced.skipped_steps <= 40);
  BOOST_TEST(forced.loss_scale < 1099511627776.0);
  BOOST_TEST(std::fabs(forced.test_acc - normal.test_acc) <= 0.02,
             "forced " << forced.test_acc << " vs " << normal.test_acc);
  // Rate-limited: a handful of warning lines, not one per skipped step, each naming a weight.
  const std::size_t warnings = count_of(forced.errors, "gradient overflow");
  BOOST_TEST(warnings >= 1u);
  BOOST_TEST(warnings <= 3u, forced.errors);
  BOOST_TEST(forced.errors.find("(first in ") != std::string::npos, forced.errors);
  BOOST_TEST(forced.errors.find(".weight") != std::string::npos, forced.errors);
}

BOOST_AUTO_TEST_CASE(a_scale_stuck_at_its_minimum_stops_training) {
  // A static-free dynamic scaler whose minimum still overflows: min = max = 2^40.
  TempDir dir;
  const std::string huge = "1099511627776";
  const std::string log = dir.file("stuck.json");
  const ProcessResult result = run_alloy(
      quick_train_args({"--epochs", "1", "--opt-level", "O2", "--init-loss-scale", huge,
                        "--min-loss-scale", huge, "--max-loss-scale", huge, "--log-json", log}));
  BOOST_TEST(result.exit_code == 1);
  BOOST_TEST(result.errors.find("at its minimum") != std::string::npos, result.errors);
  BOOST_TEST(count_of(result.errors, "\n") <= 4u, result.errors);  // no stack trace
}

BOOST_AUTO_TEST_SUITE_END()
