#include "core/data/sampler.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"

using namespace alloy;
using namespace alloy::data;

namespace {

using Indices = std::vector<std::int64_t>;

Indices iota(std::int64_t size) {
  Indices values(static_cast<std::size_t>(size));
  std::iota(values.begin(), values.end(), std::int64_t{0});
  return values;
}

// True when `indices` holds each of 0 .. size-1 exactly once.
bool is_permutation_of_range(Indices indices, std::int64_t size) {
  std::sort(indices.begin(), indices.end());
  return indices == iota(size);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sampler)

BOOST_AUTO_TEST_CASE(shuffled_epochs_are_complete_permutations) {
  for (const std::int64_t size : {1, 2, 17, 1000}) {
    const Sampler sampler(size, 42, true);
    BOOST_TEST(sampler.per_rank() == size);
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      const Indices indices = sampler.epoch_indices(epoch);
      BOOST_TEST(is_permutation_of_range(indices, size), "size " << size << " epoch " << epoch);
    }
  }
  BOOST_TEST(Sampler(0, 1, true).epoch_indices(0).empty());
}

BOOST_AUTO_TEST_CASE(shuffled_order_is_not_the_identity) {
  const Indices indices = Sampler(1000, 7, true).epoch_indices(0);
  const auto fixed_points = std::inner_product(indices.begin(), indices.end(), iota(1000).begin(),
                                               0, std::plus<>(), std::equal_to<>());
  // A random permutation has one fixed point on average.
  BOOST_TEST(fixed_points < 10);
}

BOOST_AUTO_TEST_CASE(order_depends_only_on_seed_and_epoch) {
  const Sampler first(500, 1234, true);
  const Sampler again(500, 1234, true);
  for (std::int64_t epoch : {0, 1, 5}) {
    BOOST_TEST(first.epoch_indices(epoch) == again.epoch_indices(epoch));
  }
  // Asking for a later epoch first changes nothing (no hidden state between epochs).
  const Sampler fresh(500, 1234, true);
  const Indices epoch3 = fresh.epoch_indices(3);
  BOOST_TEST(fresh.epoch_indices(3) == epoch3);
  BOOST_TEST(first.epoch_indices(3) == epoch3);
}

BOOST_AUTO_TEST_CASE(order_differs_across_epochs_and_seeds) {
  const Sampler sampler(500, 1234, true);
  std::set<Indices> orders;
  for (std::int64_t epoch = 0; epoch < 5; ++epoch)
    orders.insert(sampler.epoch_indices(epoch));
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    orders.insert(Sampler(500, seed, true).epoch_indices(0));
  }
  // (seed 1, epoch 0) and (seed 0, epoch 1) must not coincide either.
  orders.insert(Sampler(500, 0, true).epoch_indices(1));
  orders.insert(Sampler(500, 1, true).epoch_indices(1));
  BOOST_TEST(orders.size() == 12u);
}

BOOST_AUTO_TEST_CASE(without_shuffle_the_order_is_the_identity) {
  const Sampler sampler(37, 99, false);
  BOOST_TEST(sampler.epoch_indices(0) == iota(37));
  BOOST_TEST(sampler.epoch_indices(4) == iota(37));
}

BOOST_AUTO_TEST_CASE(shards_are_disjoint_equal_and_cover_the_permutation) {
  for (const int world : {2, 3, 4, 7}) {
    const std::int64_t size = 100;  // 100 divides by 2 and 4, not by 3 or 7
    const std::int64_t per_rank = (size + world - 1) / world;
    const Indices whole = Sampler(size, 5, true).epoch_indices(2);
    std::vector<std::int64_t> count(static_cast<std::size_t>(size), 0);
    Indices padded(static_cast<std::size_t>(per_rank * world));
    for (int rank = 0; rank < world; ++rank) {
      const Sampler shard(size, 5, true, rank, world);
      BOOST_TEST(shard.per_rank() == per_rank);
      const Indices indices = shard.epoch_indices(2);
      BOOST_REQUIRE(static_cast<std::int64_t>(indices.size()) == per_rank);
      for (std::size_t k = 0; k < indices.size(); ++k) {
        ++count[static_cast<std::size_t>(indices[k])];
        padded[k * static_cast<std::size_t>(world) + static_cast<std::size_t>(rank)] = indices[k];
      }
    }
    // Interleaving the shards gives back the single-rank permutation, padded by wrapping.
    for (std::size_t p = 0; p < padded.size(); ++p) {
      BOOST_TEST(padded[p] == whole[p % whole.size()], "world " << world << " position " << p);
    }
    const std::int64_t padding = per_rank * world - size;
    const auto repeated = std::count(count.begin(), count.end(), 2);
    const auto missing = std::count(count.begin(), count.end(), 0);
    BOOST_TEST(missing == 0, "world " << world);
    BOOST_TEST(repeated == padding, "world " << world);
  }
}

BOOST_AUTO_TEST_CASE(unshuffled_shards_stride_through_the_dataset) {
  BOOST_TEST(Sampler(10, 0, false, 1, 4).epoch_indices(0) == (Indices{1, 5, 9}));
  BOOST_TEST(Sampler(10, 0, false, 3, 4).epoch_indices(0) == (Indices{3, 7, 1}));
  // More ranks than examples: every rank still gets one, wrapping around.
  BOOST_TEST(Sampler(2, 0, false, 4, 5).epoch_indices(0) == (Indices{0}));
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_rejected) {
  BOOST_CHECK_THROW(Sampler(10, 0, true, 0, 0), UsageError);
  BOOST_CHECK_THROW(Sampler(10, 0, true, 2, 2), UsageError);
  BOOST_CHECK_THROW(Sampler(10, 0, true, -1, 2), UsageError);
  BOOST_CHECK_THROW(Sampler(-1, 0, true), Error);
  BOOST_CHECK_THROW(Sampler(10, 0, true).epoch_indices(-1), Error);
  try {
    Sampler(10, 0, true, 3, 2);
    BOOST_ERROR("rank 3 of 2 accepted");
  } catch (const UsageError& error) {
    BOOST_TEST(std::string(error.what()) == "rank 3 is outside the world of 2 ranks");
  }
}

BOOST_AUTO_TEST_SUITE_END()
