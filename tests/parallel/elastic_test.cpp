// The decisions of the elastic launchers (parallel/elastic.h, apps/train/elastic.h): what a
// generation's node reports add up to, and the worker arguments of a generation.
#include "parallel/elastic.h"

#include <boost/test/unit_test.hpp>

#include "apps/cli/launcher.h"
#include "apps/train/elastic.h"

using alloy::parallel::GenerationVerdict;
using alloy::parallel::judge_generation;
using alloy::parallel::NodeReport;
using Outcome = NodeReport::Outcome;
using Action = GenerationVerdict::Action;

namespace {

NodeReport report(int node, Outcome outcome, const std::string& cause = "", bool signal = false,
                  bool usage = false) {
  NodeReport r;
  r.node = node;
  r.outcome = outcome;
  r.cause = cause;
  r.killed_by_signal = signal;
  r.usage_error = usage;
  return r;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(elastic)

BOOST_AUTO_TEST_CASE(every_node_succeeding_finishes) {
  const auto verdict =
      judge_generation({report(0, Outcome::succeeded), report(1, Outcome::succeeded)});
  BOOST_TEST((verdict.action == Action::finish));
}

BOOST_AUTO_TEST_CASE(the_cause_is_the_worker_killed_by_a_signal_not_the_one_that_lost_it) {
  const auto verdict =
      judge_generation({report(0, Outcome::failed, "rank 0 (pid 10) exited with status 1"),
                        report(1, Outcome::failed, "rank 1 (pid 11) was killed by SIGKILL", true),
                        report(2, Outcome::stopped, "the workers were stopped on request")});
  BOOST_TEST((verdict.action == Action::restart));
  BOOST_TEST(verdict.cause == "node 1: rank 1 (pid 11) was killed by SIGKILL");
  BOOST_TEST(!verdict.usage_error);
}

BOOST_AUTO_TEST_CASE(one_node_names_no_node_and_the_first_failure_wins_a_tie) {
  const auto single = judge_generation({report(0, Outcome::failed, "rank 1 exited 1")});
  BOOST_TEST(single.cause == "rank 1 exited 1");
  const auto tie =
      judge_generation({report(0, Outcome::failed, "first"), report(1, Outcome::failed, "second")});
  BOOST_TEST(tie.cause == "node 0: first");
}

BOOST_AUTO_TEST_CASE(an_interrupt_or_a_usage_error_gives_up) {
  const auto interrupted = judge_generation(
      {report(0, Outcome::failed, "x", true), report(1, Outcome::interrupted, "by SIGTERM")});
  BOOST_TEST((interrupted.action == Action::give_up));
  BOOST_TEST(interrupted.cause == "node 1: by SIGTERM");
  const auto usage =
      judge_generation({report(0, Outcome::failed, "rank 0 exited with status 2", false, true)});
  BOOST_TEST((usage.action == Action::give_up));
  BOOST_TEST(usage.usage_error);
}

BOOST_AUTO_TEST_CASE(a_generation_moves_the_port_and_the_resume_flags) {
  const std::vector<std::string> args = {"--model", "mlp", "--master-port=29500", "--resume", "old",
                                         "--lr",    "0.1"};
  const auto first = alloy::app::generation_arguments(args, 4242, "");
  const std::vector<std::string> expected_first = {"--model", "mlp", "--resume",      "old",
                                                   "--lr",    "0.1", "--master-port", "4242"};
  BOOST_TEST(first == expected_first, boost::test_tools::per_element());
  const auto later = alloy::app::generation_arguments(args, 4343, "run/step-00000040.ckpt");
  const std::vector<std::string> expected_later = {
      "--model",       "mlp",  "--lr",     "0.1",
      "--master-port", "4343", "--resume", "run/step-00000040.ckpt"};
  BOOST_TEST(later == expected_later, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
