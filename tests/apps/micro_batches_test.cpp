// How gradient accumulation splits a step's batch (apps/train/micro_batches.h): the sizes of an
// even and an uneven batch, the usage errors of batches that do not split, and micro-batches as
// views of the batch's storage.
#include "apps/train/micro_batches.h"

#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/error.h"

using namespace alloy;
using namespace alloy::app;

namespace {

using Sizes = std::vector<std::int64_t>;

// The UsageError's message, or "" when `call` throws nothing.
template <class Call>
std::string usage_error(const Call& call) {
  try {
    call();
  } catch (const UsageError& error) {
    return error.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(micro_batches)

BOOST_AUTO_TEST_CASE(a_batch_splits_as_evenly_as_possible_the_first_ones_larger) {
  BOOST_TEST(micro_batch_sizes(64, 4) == (Sizes{16, 16, 16, 16}), boost::test_tools::per_element());
  BOOST_TEST(micro_batch_sizes(64, 1) == (Sizes{64}), boost::test_tools::per_element());
  // An epoch's last, smaller batch: 10 = 3 + 3 + 2 + 2; 35 = 9 + 9 + 9 + 8.
  BOOST_TEST(micro_batch_sizes(10, 4) == (Sizes{3, 3, 2, 2}), boost::test_tools::per_element());
  BOOST_TEST(micro_batch_sizes(35, 4) == (Sizes{9, 9, 9, 8}), boost::test_tools::per_element());
  // Fewer rows than micro-batches: the empty ones are left out.
  BOOST_TEST(micro_batch_sizes(3, 4) == (Sizes{1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(micro_batch_sizes(0, 4).empty());
  for (std::int64_t rows = 0; rows < 40; ++rows) {
    for (std::int64_t steps = 1; steps < 9; ++steps) {
      const Sizes sizes = micro_batch_sizes(rows, steps);
      std::int64_t total = 0;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        total += sizes[i];
        BOOST_TEST(sizes[i] >= 1);
        if (i > 0) BOOST_TEST((sizes[i] == sizes[i - 1] || sizes[i] == sizes[i - 1] - 1));
      }
      BOOST_TEST(total == rows);
      BOOST_TEST(sizes.size() == static_cast<std::size_t>(std::min(rows, steps)));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_share_that_does_not_split_evenly_is_a_usage_error_naming_the_flag) {
  BOOST_TEST(micro_batch_size(256, 1, 4) == 64);
  BOOST_TEST(micro_batch_size(256, 2, 4) == 32);
  BOOST_TEST(micro_batch_size(256, 2, 1) == 128);
  BOOST_TEST(usage_error([] { micro_batch_size(256, 2, 3); }) ==
             "batch_size 256 over 2 ranks is 128 examples per rank, which "
             "accumulation_steps 3 does not divide");
  const std::string single = usage_error([] { micro_batch_size(100, 1, 3); });
  BOOST_TEST(single.find("accumulation_steps 3") != std::string::npos, single);
  BOOST_TEST(single.find("batch_size 100") != std::string::npos, single);
  const std::string zero = usage_error([] { micro_batch_size(256, 1, 0); });
  BOOST_TEST(zero.find("accumulation_steps must be at least 1, got 0") != std::string::npos, zero);
  // The ranks' share is checked first, as without accumulation.
  const std::string ranks = usage_error([] { micro_batch_size(255, 2, 1); });
  BOOST_TEST(ranks.find("must divide evenly among the 2 ranks") != std::string::npos, ranks);
}

BOOST_AUTO_TEST_CASE(micro_batches_are_views_of_the_batch) {
  Tensor images = Tensor::zeros({5, 1, 2, 3}, DType::u8);
  for (std::int64_t i = 0; i < images.numel(); ++i)
    images.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i);
  const Tensor rows = batch_rows(images, 2, 2);
  BOOST_TEST((rows.shape() == Shape{2, 1, 2, 3}));
  BOOST_TEST(rows.raw() == static_cast<const void*>(images.data<std::uint8_t>() + 12));
  BOOST_TEST(rows.data<std::uint8_t>()[0] == 12);
  const Tensor labels = Tensor::from_floats({5}, {0, 1, 2, 3, 4}, DType::i32);
  BOOST_TEST(batch_rows(labels, 3, 2).data<std::int32_t>()[0] == 3);
  BOOST_TEST(batch_rows(labels, 0, 5).raw() == labels.raw());
  BOOST_CHECK_THROW(batch_rows(labels, 4, 2), Error);
}

BOOST_AUTO_TEST_SUITE_END()
