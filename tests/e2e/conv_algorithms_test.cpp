// --conv-algorithms end to end: a value other than heuristic or measured is a usage error naming
// the flag, from the command line or a config file; the help lists it; on the CPU it is
// accepted and ignored (the start event names it on a GPU only). (The choice itself:
// tests/core/ops/conv2d_measured_gpu_test.cpp, tests/apps/conv_algorithms_checkpoint_gpu_test.cpp.)
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(conv_algorithms_e2e)

BOOST_AUTO_TEST_CASE(bad_values_are_usage_errors_naming_the_flag) {
  check_usage_error(quick_train_args({"--conv-algorithms", "fastest"}),
                    "--conv-algorithms 'fastest' is not one of heuristic");
  const TempDir dir;
  const std::string config = dir.file("run.cfg");
  std::ofstream(config) << "conv-algorithms sometimes\n";
  check_usage_error(quick_train_args({"--config", config}), "--conv-algorithms");
  const ProcessResult help = run_alloy({"train", "--help"});
  BOOST_TEST(help.output.find("--conv-algorithms") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_cpu_accepts_and_ignores_it) {
  const TempDir dir;
  const TrainRun run = run_logged(
      dir, "heuristic", quick_train_args({"--epochs", "1", "--conv-algorithms", "heuristic"}));
  BOOST_TEST_REQUIRE(run.process.exit_code == 0, run.process.errors);
  const auto starts = events(run.log, "start");
  BOOST_TEST_REQUIRE(starts.size() == 1u);
  BOOST_TEST(starts[0].find("conv_algorithms") == std::string::npos, starts[0]);
}

BOOST_AUTO_TEST_SUITE_END()
