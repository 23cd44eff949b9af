// --layout end to end: the start event names the layout chosen (auto is NCHW on the CPU);
// unknown values, and nhwc for a model without a layout region, are usage errors naming the
// flag, from the command line and a config file; the help lists it. (The bits:
// tests/core/nn/layout_boundary_test.cpp; the rule: tests/apps/layout_choice_test.cpp.)
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(layout_e2e)

BOOST_AUTO_TEST_CASE(the_start_event_names_the_layout_chosen) {
  const TempDir dir;
  const TrainRun run = run_logged(dir, "plain", quick_train_args({"--epochs", "1"}));
  BOOST_TEST_REQUIRE(run.process.exit_code == 0, run.process.errors);
  const auto starts = events(run.log, "start");
  BOOST_TEST_REQUIRE(starts.size() == 1u);
  BOOST_TEST(json_field(starts[0], "layout") == "nchw");
}

BOOST_AUTO_TEST_CASE(bad_values_are_usage_errors_naming_the_flag) {
  check_usage_error(quick_train_args({"--layout", "channels-last"}),
                    "--layout 'channels-last' is not one of auto, nchw or nhwc");
  check_usage_error({"train", "--model", "lenet", "--dataset", "synthetic", "--device", "cpu",
                     "--layout", "nhwc"},
                    "--layout nhwc: model 'lenet' has no layout region");
  const TempDir dir;
  const std::string config = dir.file("run.cfg");
  std::ofstream(config) << "layout sideways\n";
  check_usage_error(quick_train_args({"--config", config}), "--layout 'sideways'");
  const ProcessResult help = run_alloy({"train", "--help"});
  BOOST_TEST(help.output.find("--layout") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
