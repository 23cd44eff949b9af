// `alloy train --cuda-graph` from the command line: a bad value and `on` where the step cannot
// be captured (the CPU, data parallelism) are usage errors (exit 2) that say why, before
// any data is loaded or worker started (or, when --device auto settles on the CPU, before any
// output); on the CPU, auto trains eagerly and the start event says "cuda_graph":false.
#include <boost/test/unit_test.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/backend.h"
#include "tests/support/process.h"

using namespace alloy::test;

namespace {

constexpr int kUsage = 2;

void check_usage_error(const std::vector<std::string>& args, const std::string& why) {
  std::vector<std::string> words = {"train"};
  words.insert(words.end(), args.begin(), args.end());
  const ProcessResult result = run_alloy(words);
  BOOST_TEST_CONTEXT(result.errors) {
    BOOST_TEST(result.exit_code == kUsage);
    BOOST_TEST(result.errors.find("--cuda-graph") != std::string::npos);
    BOOST_TEST(result.errors.find(why) != std::string::npos);
    BOOST_TEST(result.errors.find("terminate") == std::string::npos);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_graph_cli)

BOOST_AUTO_TEST_CASE(impossible_or_bad_requests_are_usage_errors_that_say_why) {
  check_usage_error({"--cuda-graph", "always"}, "auto, on or off");
  check_usage_error({"--cuda-graph", "on", "--device", "cpu"}, "CPU");
  check_usage_error(
      {"--cuda-graph", "on", "--gpus", "2", "--device", "cuda", "--dist-backend", "gloo"},
      "over Gloo (2 ranks)");
}

BOOST_AUTO_TEST_CASE(on_with_a_device_auto_that_finds_no_gpu_fails_before_any_output) {
  std::string reason;
  if (alloy::cuda_available(&reason)) {
    BOOST_TEST_MESSAGE("--device auto finds a GPU here: nothing to check");
    return;
  }
  const std::vector<std::string> args = {"--cuda-graph", "on",        "--model",  "mlp",
                                         "--dataset",    "synthetic", "--epochs", "1"};
  check_usage_error(args, "CPU");
  std::vector<std::string> words = {"train"};
  words.insert(words.end(), args.begin(), args.end());
  BOOST_TEST(run_alloy(words).output.empty());
}

BOOST_AUTO_TEST_CASE(auto_on_the_cpu_trains_eagerly_and_the_start_event_says_so) {
  const ProcessResult result =
      run_alloy({"train", "--model", "mlp", "--dataset", "synthetic", "--device", "cpu",
                 "--threads", "1", "--epochs", "1", "--batch-size", "256", "--log-json", "-"});
  BOOST_TEST_CONTEXT(result.errors) {
    BOOST_REQUIRE_EQUAL(result.exit_code, 0);
    std::istringstream lines(result.output);
    std::string start;
    std::getline(lines, start);
    BOOST_TEST(start.find("\"event\":\"start\"") != std::string::npos, start);
    BOOST_TEST(start.find("\"cuda_graph\":false") != std::string::npos, start);
  }
}

BOOST_AUTO_TEST_SUITE_END()
