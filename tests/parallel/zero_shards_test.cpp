// The shards of ZeRO's flat parameter space (parallel/zero_shards.h): ceil(N / W) elements per
// rank, the last ones shorter or empty, every element owned exactly once.
#include "parallel/zero_shards.h"

#include <boost/test/unit_test.hpp>
#include <numeric>

#include "core/error.h"

using namespace alloy;
using namespace alloy::parallel;

BOOST_AUTO_TEST_SUITE(zero_shards)

BOOST_AUTO_TEST_CASE(ranges_are_ceil_sized_and_cover_the_space_once) {
  struct Expected {
    std::int64_t total;
    int world;
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  };
  const std::vector<Expected> cases = {
      {10, 1, {{0, 10}}},
      {10, 2, {{0, 5}, {5, 10}}},
      {10, 4, {{0, 3}, {3, 6}, {6, 9}, {9, 10}}},
      {9, 4, {{0, 3}, {3, 6}, {6, 9}, {9, 9}}},
      {2, 4, {{0, 1}, {1, 2}, {2, 2}, {2, 2}}},
      {0, 3, {{0, 0}, {0, 0}, {0, 0}}},
  };
  for (const Expected& c : cases) {
    for (int rank = 0; rank < c.world; ++rank) {
      const ShardRange range = shard_range(c.total, c.world, rank);
      BOOST_TEST_CONTEXT("N " << c.total << ", W " << c.world << ", rank " << rank) {
        BOOST_TEST(range.begin == c.ranges[rank].first);
        BOOST_TEST(range.end == c.ranges[rank].second);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(owned_counts_split_any_stretch_by_owner) {
  // N 10 over 4 ranks: [0,3) [3,6) [6,9) [9,10).
  BOOST_TEST(owned_counts(10, 4, 2, 7) == (std::vector<std::int64_t>{1, 3, 1, 0}),
             boost::test_tools::per_element());
  BOOST_TEST(owned_counts(10, 4, 0, 10) == (std::vector<std::int64_t>{3, 3, 3, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(owned_counts(10, 4, 4, 4) == (std::vector<std::int64_t>{0, 0, 0, 0}),
             boost::test_tools::per_element());
  for (std::int64_t total = 0; total < 40; ++total) {
    for (int world = 1; world <= 5; ++world) {
      const auto counts = owned_counts(total, world, 0, total);
      BOOST_TEST(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) == total);
    }
  }
  BOOST_TEST(flat_offsets({3, 0, 5}) == (std::vector<std::int64_t>{0, 3, 3, 8}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_errors) {
  BOOST_CHECK_THROW(shard_range(10, 0, 0), Error);
  BOOST_CHECK_THROW(shard_range(10, 2, 2), Error);
  BOOST_CHECK_THROW(shard_range(-1, 2, 0), Error);
  BOOST_CHECK_THROW(owned_counts(10, 2, 5, 11), Error);
}

BOOST_AUTO_TEST_SUITE_END()
