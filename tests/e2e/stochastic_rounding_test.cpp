// `alloy train --stochastic-rounding` end to end on short MLP runs on the CPU: the help lists it
// and the start event says whether it is on; at O3, and at O2 without master weights, it changes
// the trained weights (the half weights are rounded stochastically), while at O0 (no half
// weights) it changes no bit; a checkpoint carries it, and a run resumed from step k with it on
// ends with the weights of the straight 2k-step run. (The rounding itself:
// tests/core/stochastic_rounding_test.cpp; CPU and CUDA bits:
// tests/core/ops/optimizer_update_rounding_gpu_test.cpp.)
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "tests/e2e/checkpoint_runs.h"

using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(stochastic_rounding_e2e)

BOOST_AUTO_TEST_CASE(the_help_and_the_start_event_name_it) {
  const ProcessResult help = run_alloy({"train", "--help"});
  BOOST_TEST(help.output.find("--stochastic-rounding") != std::string::npos);
  const TempDir dir;
  const TrainRun plain = run_quick(dir, "plain", {"--epochs", "1", "--opt-level", "O3"});
  const TrainRun rounded =
      run_quick(dir, "rounded", {"--epochs", "1", "--opt-level", "O3", "--stochastic-rounding"});
  BOOST_TEST(last_field(plain, "start", "stochastic_rounding") == "false");
  BOOST_TEST(last_field(rounded, "start", "stochastic_rounding") == "true");
  BOOST_TEST(!plain.digest().empty());
  BOOST_TEST(rounded.digest() != plain.digest(), "the half weights must be rounded otherwise");
  check_usage_error(quick_train_args({"--stochastic-rounding=often"}), "stochastic-rounding");
}

BOOST_AUTO_TEST_CASE(only_half_weights_without_masters_are_rounded) {
  const TempDir dir;
  const auto digest = [&](const std::string& name, std::vector<std::string> args) {
    args.insert(args.end(), {"--epochs", "1"});
    return run_quick(dir, name, args).digest();
  };
  BOOST_TEST(digest("o0", {"--opt-level", "O0"}) ==
             digest("o0-sr", {"--opt-level", "O0", "--stochastic-rounding"}));
  BOOST_TEST(digest("o2", {"--opt-level", "O2"}) ==
             digest("o2-sr", {"--opt-level", "O2", "--stochastic-rounding"}));
  BOOST_TEST(digest("o2-nm", {"--opt-level", "O2", "--master-weights", "false"}) !=
             digest("o2-nm-sr",
                    {"--opt-level", "O2", "--master-weights", "false", "--stochastic-rounding"}));
}

BOOST_AUTO_TEST_CASE(a_resumed_run_continues_with_the_same_bits) {
  const TempDir dir;
  const std::string checkpoints = dir.file("run");
  for (const char* half : {"fp16", "bf16"}) {
    const std::vector<std::string> recipe = {"--opt-level", "O3", "--half-dtype", half,
                                             "--stochastic-rounding"};
    std::vector<std::string> first = recipe, straight = recipe;
    first.insert(first.end(), {"--epochs", "1", "--checkpoint-dir", checkpoints + half,
                               "--checkpoint-every", "30"});
    straight.insert(straight.end(), {"--epochs", "2"});
    run_quick(dir, std::string("first-") + half, first);
    // Mid-epoch (step 30), so the resumed run's step count and data position both matter.
    const TrainRun resumed =
        run_quick(dir, std::string("resumed-") + half,
                  {"--epochs", "2", "--resume", checkpoints + half + "/step-00000030.ckpt"});
    const TrainRun whole = run_quick(dir, std::string("straight-") + half, straight);
    BOOST_TEST(last_field(resumed, "start", "stochastic_rounding") == "true", half);
    BOOST_TEST(!whole.digest().empty());
    BOOST_TEST(resumed.digest() == whole.digest(), half);
  }
}

BOOST_AUTO_TEST_SUITE_END()
