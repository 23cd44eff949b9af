// The order in which the CUDA convolution tries cuDNN's algorithms, and the first that runs
// (core/ops/cuda/conv2d_algorithms.h): pure host logic, checked here without a GPU on fake
// heuristic answers and fake executions.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/ops/cuda/conv2d_algorithms.h"

using namespace alloy;
using alloy::cuda::AlgorithmOffer;

namespace {

constexpr std::size_t kLimit = 1000;

AlgorithmOffer offer(int algo, int math, bool offered, std::size_t workspace, bool deterministic) {
  return {algo,    math,      "A" + std::to_string(algo) + "/m" + std::to_string(math),
          offered, workspace, deterministic};
}

std::vector<int> algos(const std::vector<AlgorithmOffer>& offers) {
  std::vector<int> result;
  for (const AlgorithmOffer& o : offers)
    result.push_back(o.algo);
  return result;
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

BOOST_AUTO_TEST_SUITE_END()
