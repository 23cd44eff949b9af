// --recompute end to end: the start event names the setting; a value other than none or
// blocks, and blocks for a model that has none, are usage errors naming the flag, from the
// command line, a config file or the launcher's workers; the help lists it.
// (The bits and the memory: tests/core/nn/recompute_test.cpp,
// tests/apps/trainer_recompute_test.cpp, and `alloy mem` in tests/e2e/mem_test.cpp.)
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(recompute_e2e)

BOOST_AUTO_TEST_CASE(the_start_event_names_it) {
  const TempDir dir;
  const TrainRun run = run_logged(dir, "plain", quick_train_args({"--epochs", "1"}));
  BOOST_TEST_REQUIRE(run.process.exit_code == 0, run.process.errors);
  const auto starts = events(run.log, "start");
  BOOST_TEST_REQUIRE(starts.size() == 1u);
  BOOST_TEST(json_field(starts[0], "recompute") == "none");
}

BOOST_AUTO_TEST_CASE(bad_values_are_usage_errors_naming_the_flag) {
  check_usage_error(quick_train_args({"--recompute", "sometimes"}),
                    "--recompute 'sometimes' is not one of none or blocks");
  check_usage_error(quick_train_args({"--recompute", "blocks"}),
                    "--recompute blocks: model 'mlp' has no blocks to recompute");
  check_usage_error({"train", "--model", "lenet", "--dataset", "synthetic", "--device", "cpu",
                     "--recompute", "blocks"},
                    "--recompute blocks: model 'lenet' has no blocks to recompute");
  check_usage_error(quick_train_args({"--gpus", "2", "--recompute", "blocks"}),
                    "--recompute blocks: model 'mlp' has no blocks to recompute");
  const TempDir dir;
  const std::string config = dir.file("run.cfg");
  std::ofstream(config) << "recompute sometimes\n";
  check_usage_error(quick_train_args({"--config", config}), "--recompute");
  const ProcessResult help = run_alloy({"train", "--help"});
  BOOST_TEST(help.output.find("--recompute") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
