// The order in which the CUDA convolution tries cuDNN's algorithms and its own direct kernels,
// the first that runs, and their names (core/ops/cuda/conv2d_algorithms.h): pure host logic,
// checked here without a GPU on fake heuristic answers and fake executions.
#include <boost/test/unit_test.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/ops/cuda/conv2d_algorithms.h"

using namespace alloy;
using alloy::cuda::AlgorithmOffer;

namespace {

constexpr std::size_t kLimit = 1000;

AlgorithmOffer offer(int algo, int math, bool offered, std::size_t workspace, bool deterministic,
                     float milliseconds = 0.0f) {
  return {algo,        math,      "A" + std::to_string(algo) + "/m" + std::to_string(math),
          offered,     workspace, deterministic,
          milliseconds};
}

std::vector<int> algos(const std::vector<AlgorithmOffer>& offers) {
  std::vector<int> result;
  for (const AlgorithmOffer& o : offers)
    result.push_back(o.algo);
  return result;
}

// The one Find timed fastest among the candidates, if any qualifies.
std::optional<std::size_t> fastest(const std::vector<AlgorithmOffer>& candidates,
                                   const std::vector<AlgorithmOffer>& timed,
                                   bool require_deterministic, std::size_t workspace_limit) {
  const std::vector<std::size_t> ranked =
      cuda::fastest_candidates(candidates, timed, require_deterministic, workspace_limit, 1);
  if (ranked.empty()) return std::nullopt;
  return ranked.front();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv2d_algorithms)

BOOST_AUTO_TEST_CASE(forward_keeps_cudnns_order_of_what_it_offers_within_the_limit) {
  const std::vector<AlgorithmOffer> offers = {
      offer(6, 1, true, 10, false),    // fastest, non-deterministic: fine forward
      offer(4, 1, false, 10, true),    // not offered (status not SUCCESS)
      offer(5, 1, true, 5000, true),   // over the workspace limit
      offer(1, 1, true, 0, true),      //
      offer(1, 1, true, 0, true),      // the same (algorithm, math) again: tried once
      offer(1, 0, true, kLimit, true)  // the same algorithm with another math type, at the limit
  };
  const auto candidates = cuda::algorithm_candidates(offers, false, kLimit);
  BOOST_TEST(algos(candidates) == (std::vector<int>{6, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(candidates[1].math_type == 1);
  BOOST_TEST(candidates[2].math_type == 0);
}

BOOST_AUTO_TEST_CASE(backward_tries_deterministic_algorithms_first_and_the_others_last) {
  const std::vector<AlgorithmOffer> offers = {
      offer(0, 1, true, 0, false),  // ALGO_0: atomics
      offer(3, 1, true, 0, false),  // ALGO_3: atomics
      offer(1, 1, true, 0, true),   //
      offer(5, 1, true, 8, true),   //
  };
  BOOST_TEST(
      algos(cuda::algorithm_candidates(offers, true, kLimit)) == (std::vector<int>{1, 5, 0, 3}),
      boost::test_tools::per_element());
  BOOST_TEST(
      algos(cuda::algorithm_candidates(offers, false, kLimit)) == (std::vector<int>{0, 3, 1, 5}),
      boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_first_candidate_that_runs_is_kept_and_the_later_ones_are_not_tried) {
  const std::vector<AlgorithmOffer> candidates = {
      offer(7, 1, true, 0, true), offer(6, 1, true, 0, true), offer(1, 1, true, 0, true)};
  std::vector<int> tried;
  const std::size_t chosen =
      cuda::first_working_algorithm(candidates, "forward", [&](const AlgorithmOffer& o) {
        tried.push_back(o.algo);
        return o.algo == 7 ? std::string("CUDNN_STATUS_NOT_SUPPORTED") : std::string();
      });
  BOOST_TEST(chosen == 1u);
  BOOST_TEST(tried == (std::vector<int>{7, 6}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(when_none_runs_the_error_names_the_convolution_and_every_attempt) {
  const std::vector<AlgorithmOffer> candidates = {offer(4, 1, true, 0, true),
                                                  offer(6, 1, true, 0, true)};
  const std::string what =
      "conv2d forward of bf16 x [8, 1, 28, 28] with 6 filters 5x5, stride 1x1, padding 2x2";
  BOOST_CHECK_EXCEPTION(
      cuda::first_working_algorithm(candidates, what,
                                    [](const AlgorithmOffer& o) {
                                      return o.algo == 4 ? std::string("NOT_SUPPORTED")
                                                         : std::string("EXECUTION_FAILED");
                                    }),
      Error, [&](const Error& error) {
        const std::string message = error.what();
        BOOST_TEST_MESSAGE(message);
        return message.find(what) != std::string::npos &&
               message.find("algorithm 4 A4/m1: NOT_SUPPORTED") != std::string::npos &&
               message.find("algorithm 6 A6/m1: EXECUTION_FAILED") != std::string::npos &&
               message.find("none of the 2") != std::string::npos;
      });
}

BOOST_AUTO_TEST_CASE(no_candidate_at_all_is_an_error_naming_the_convolution) {
  const std::vector<AlgorithmOffer> none =
      cuda::algorithm_candidates({offer(5, 1, true, 5000, true)}, true, kLimit);
  BOOST_TEST(none.empty());
  BOOST_CHECK_EXCEPTION(
      cuda::first_working_algorithm(none, "conv2d input gradient of f16 x [1, 2, 3, 4]",
                                    [](const AlgorithmOffer&) { return std::string(); }),
      Error, [](const Error& error) {
        const std::string message = error.what();
        return message.find("input gradient of f16 x [1, 2, 3, 4]") != std::string::npos &&
               message.find("no algorithm") != std::string::npos;
      });
}

BOOST_AUTO_TEST_CASE(measured_pick_is_the_fastest_timed_candidate_that_qualifies) {
  const std::vector<AlgorithmOffer> candidates = {
      offer(1, 1, true, 0, true), offer(5, 1, true, 8, true), offer(7, 1, true, 16, true),
      offer(0, 1, true, 0, false)};
  // Find's answer, fastest first as cuDNN sorts it; each skipped one for its own reason.
  const std::vector<AlgorithmOffer> timed = {
      offer(0, 1, true, 0, false, 0.05f),          // fastest, but non-deterministic
      offer(2, 1, true, 0, true, 0.06f),           // not among the candidates
      offer(7, 1, false, 16, true, 0.07f),         // failed in Find (status not SUCCESS)
      offer(7, 0, true, 16, true, 0.08f),          // another math type than the candidate's
      offer(5, 1, true, kLimit + 1, true, 0.09f),  // over the workspace limit
      offer(1, 1, true, 0, true, -1.0f),           // no time
      offer(7, 1, true, 16, true, 0.30f),          // the one: candidate 2 ...
      offer(5, 1, true, 8, true, 0.40f),           // ... faster than candidate 1
  };
  BOOST_TEST(fastest(candidates, timed, true, kLimit).value() == 2u);
  // Forward: determinism is not asked for, so the fastest of all is a candidate's.
  BOOST_TEST(fastest(candidates, timed, false, kLimit).value() == 3u);
  // Find's order is not trusted: the time decides.
  const std::vector<AlgorithmOffer> unsorted = {offer(5, 1, true, 8, true, 0.40f),
                                                offer(1, 1, true, 0, true, 0.20f)};
  BOOST_TEST(fastest(candidates, unsorted, true, kLimit).value() == 0u);
}

BOOST_AUTO_TEST_CASE(measured_contenders_are_finds_fastest_qualifying_ones_in_time_order) {
  const std::vector<AlgorithmOffer> candidates = {
      offer(1, 1, true, 0, true), offer(5, 1, true, 8, true), offer(7, 1, true, 16, true),
      offer(0, 1, true, 0, false), offer(4, 1, true, 0, true)};
  const std::vector<AlgorithmOffer> timed = {
      offer(4, 1, true, 0, true, 0.50f),  offer(0, 1, true, 0, false, 0.01f),
      offer(5, 1, true, 8, true, 0.20f),  offer(5, 1, true, 8, true, 0.25f),  // Find twice: once
      offer(7, 1, true, 16, true, 0.30f), offer(1, 1, true, 0, true, 0.40f)};
  using Indices = std::vector<std::size_t>;
  BOOST_TEST(cuda::fastest_candidates(candidates, timed, true, kLimit, 3) == (Indices{1, 2, 0}),
             boost::test_tools::per_element());
  BOOST_TEST(cuda::fastest_candidates(candidates, timed, false, kLimit, 2) == (Indices{3, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(cuda::fastest_candidates(candidates, timed, true, kLimit, 10) == (Indices{1, 2, 0, 4}),
             boost::test_tools::per_element());
  BOOST_TEST(cuda::fastest_candidates(candidates, timed, true, kLimit, 0).empty());
}

BOOST_AUTO_TEST_CASE(measured_pick_is_none_when_nothing_qualifies) {
  const std::vector<AlgorithmOffer> candidates = {offer(1, 1, true, 0, true)};
  BOOST_TEST(!fastest(candidates, {}, true, kLimit).has_value());
  BOOST_TEST(!fastest(candidates, {offer(1, 1, false, 0, true, 0.1f)}, true, kLimit).has_value());
  BOOST_TEST(!fastest({}, {offer(1, 1, true, 0, true, 0.1f)}, true, kLimit).has_value());
}

BOOST_AUTO_TEST_CASE(alloys_direct_kernels_have_a_name_in_every_direction) {
  BOOST_TEST(cuda::kDirectAlgorithm == 100);
  for (const auto name_of :
       {cuda::forward_algorithm_name, cuda::data_algorithm_name, cuda::filter_algorithm_name}) {
    BOOST_TEST(std::string(name_of(cuda::kDirectAlgorithm)) == "ALLOY_DIRECT");
    for (const int unknown : {-1, 8, 99, 101})
      BOOST_TEST(std::string(name_of(unknown)) == "?", unknown);
  }
  // cuDNN's own numbers keep their names, up to each direction's last one.
  BOOST_TEST(std::string(cuda::forward_algorithm_name(0)) == "IMPLICIT_GEMM");
  BOOST_TEST(std::string(cuda::forward_algorithm_name(7)) == "WINOGRAD_NONFUSED");
  BOOST_TEST(std::string(cuda::data_algorithm_name(5)) == "WINOGRAD_NONFUSED");
  BOOST_TEST(std::string(cuda::data_algorithm_name(6)) == "?");
  BOOST_TEST(std::string(cuda::filter_algorithm_name(6)) == "FFT_TILING");
  BOOST_TEST(std::string(cuda::filter_algorithm_name(7)) == "?");
}

BOOST_AUTO_TEST_CASE(measured_pick_takes_the_direct_kernels_only_when_they_are_fastest) {
  // conv2d's offer of its own kernels: algorithm 100, math type 0, deterministic.
  const AlgorithmOffer direct = offer(cuda::kDirectAlgorithm, 0, true, 64, true);
  const std::vector<AlgorithmOffer> candidates = {offer(1, 1, true, 0, true), direct,
                                                  offer(0, 1, true, 0, false)};
  const auto timed_direct = [&](float milliseconds) {
    AlgorithmOffer timed = direct;
    timed.milliseconds = milliseconds;
    return timed;
  };
  for (const bool deterministic : {true, false}) {
    BOOST_TEST(fastest(candidates,
                       {offer(1, 1, true, 0, true, 0.05f), timed_direct(0.01f),
                        offer(0, 1, true, 0, false, 0.02f)},
                       deterministic, kLimit)
                   .value() == 1u);
    // Slower than cuDNN's fastest deterministic algorithm: cuDNN's.
    BOOST_TEST(fastest(candidates, {offer(1, 1, true, 0, true, 0.03f), timed_direct(0.04f)},
                       deterministic, kLimit)
                   .value() == 0u);
  }
  // Forward, where determinism is not asked for: a faster non-deterministic one beats it.
  BOOST_TEST(
      fastest(candidates, {timed_direct(0.04f), offer(0, 1, true, 0, false, 0.03f)}, false, kLimit)
          .value() == 2u);
  BOOST_TEST(
      fastest(candidates, {timed_direct(0.04f), offer(0, 1, true, 0, false, 0.03f)}, true, kLimit)
          .value() == 1u);
}

BOOST_AUTO_TEST_CASE(put_first_moves_the_choice_ahead_of_the_others_in_their_order) {
  const std::vector<AlgorithmOffer> candidates = {
      offer(1, 1, true, 0, true), offer(5, 1, true, 8, true), offer(7, 1, true, 16, true),
      offer(0, 1, true, 0, false)};
  BOOST_TEST(algos(cuda::put_first(candidates, 2)) == (std::vector<int>{7, 1, 5, 0}),
             boost::test_tools::per_element());
  BOOST_TEST(algos(cuda::put_first(candidates, 0)) == algos(candidates),
             boost::test_tools::per_element());
  BOOST_TEST(cuda::candidate_index(candidates, 5, 1).value() == 1u);
  BOOST_TEST(!cuda::candidate_index(candidates, 5, 0).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
