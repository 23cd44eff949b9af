// The pure parts of data parallelism: bucket assignment and order, the predivide factor, the
// split of the global batch, and the sampler's shards (disjoint, complete, reshuffled per
// epoch, the same on every rank).
#include "parallel/ddp.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <set>

#include "core/error.h"
#include "core/models/models.h"
#include "core/random.h"
#include "parallel/distributed_sampler.h"

using namespace alloy;
using namespace alloy::parallel;

namespace {

std::vector<GradientSlot> f32_slots(const std::vector<std::int64_t>& sizes) {
  std::vector<GradientSlot> slots;
  for (const std::int64_t numel : sizes)
    slots.push_back({DType::f32, numel});
  return slots;
}

// "{4 3} {2} {1 0}": each bucket's parameter indices.
std::string members(const std::vector<Bucket>& buckets) {
  std::string out;
  for (const Bucket& bucket : buckets) {
    out += out.empty() ? "{" : " {";
    for (std::size_t i = 0; i < bucket.params.size(); ++i)
      out += (i ? " " : "") + std::to_string(bucket.params[i]);
    out += "}";
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(buckets)

BOOST_AUTO_TEST_CASE(fill_in_reverse_registration_order_and_close_at_the_cap) {
  // Sizes in bytes: 400, 400, 800, 400, 400 (f32); cap 800 bytes.
  const auto buckets = assign_buckets(f32_slots({100, 100, 200, 100, 100}), 800);
  BOOST_TEST(members(buckets) == "{4 3} {2} {1 0}");
  for (const Bucket& bucket : buckets)
    BOOST_TEST(bucket.bytes == 800u);
}

BOOST_AUTO_TEST_CASE(a_parameter_larger_than_the_cap_gets_a_bucket_of_its_own) {
  const auto buckets = assign_buckets(f32_slots({10, 1000, 10}), 100);
  BOOST_TEST(members(buckets) == "{2 1} {0}");  // 40 bytes, then 4000 closes it
  BOOST_TEST(buckets.back().bytes == 40u);      // the last one is left open below the cap
}

BOOST_AUTO_TEST_CASE(one_bucket_when_everything_fits) {
  const auto buckets = assign_buckets(f32_slots({3, 5, 7}), kDefaultBucketBytes);
  BOOST_TEST_REQUIRE(buckets.size() == 1u);
  BOOST_TEST(buckets[0].params == (std::vector<int>{2, 1, 0}), boost::test_tools::per_element());
  BOOST_TEST(buckets[0].bytes == 60u);
}

BOOST_AUTO_TEST_CASE(dtypes_never_share_a_bucket_and_buckets_come_in_ready_order) {
  // O2 with fp32 batch norm: half conv/linear gradients, fp32 norm gradients interleaved.
  const std::vector<GradientSlot> slots{{DType::f16, 100}, {DType::f32, 10}, {DType::f32, 10},
                                        {DType::f16, 100}, {DType::f32, 10}, {DType::f16, 100}};
  const auto buckets = assign_buckets(slots, 400);  // two f16 parameters fill one bucket
  BOOST_TEST(members(buckets) == "{5 3} {4 2 1} {0}");
  BOOST_TEST((buckets[0].dtype == DType::f16));
  BOOST_TEST((buckets[1].dtype == DType::f32));
  BOOST_TEST((buckets[2].dtype == DType::f16));
  // Every parameter is in exactly one bucket.
  std::multiset<int> seen;
  for (const Bucket& bucket : buckets)
    seen.insert(bucket.params.begin(), bucket.params.end());
  BOOST_TEST(seen == (std::multiset<int>{0, 1, 2, 3, 4, 5}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_real_model_in_25_mb_buckets) {
  Generator generator(1);
  auto model = models::make_model("resnet18", generator, 10);
  const auto params = model->parameters();
  std::vector<GradientSlot> slots;
  std::size_t total = 0;
  for (const nn::Parameter* param : params) {
    slots.push_back({param->value.dtype(), param->value.numel()});
    total += param->value.nbytes();
  }
  const auto buckets = assign_buckets(slots, kDefaultBucketBytes);
  BOOST_TEST_MESSAGE("resnet18: " << total << " bytes of gradients in " << buckets.size()
                                  << " buckets");
  BOOST_TEST(buckets.size() >= 2u);
  // Concatenated, the buckets list the parameters in reverse registration order; each bucket
  // but the last closed as soon as it reached the cap.
  std::vector<int> order;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& bucket = buckets[b];
    order.insert(order.end(), bucket.params.begin(), bucket.params.end());
    const std::size_t last_bytes =
        params[static_cast<std::size_t>(bucket.params.back())]->value.nbytes();
    if (b + 1 < buckets.size()) {
      BOOST_TEST(bucket.bytes >= kDefaultBucketBytes);
      BOOST_TEST(bucket.bytes - last_bytes < kDefaultBucketBytes);
    } else {
      BOOST_TEST(bucket.bytes < kDefaultBucketBytes);
    }
  }
  std::vector<int> reversed(params.size());
  for (std::size_t i = 0; i < reversed.size(); ++i)
    reversed[i] = static_cast<int>(params.size() - 1 - i);
  BOOST_TEST(order == reversed, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(predivide_factor_is_the_power_of_two_nearest_sqrt_world) {
  BOOST_TEST(predivide_factor(1) == 1.0f);
  for (const int world : {2, 3, 4, 7})
    BOOST_TEST(predivide_factor(world) == 2.0f, "world " << world);
  for (const int world : {8, 16, 31})
    BOOST_TEST(predivide_factor(world) == 4.0f, "world " << world);
  BOOST_TEST(predivide_factor(64) == 8.0f);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(distributed_sampler)

BOOST_AUTO_TEST_CASE(the_global_batch_is_split_evenly_or_refused) {
  BOOST_TEST(local_batch_size(256, 1) == 256);
  BOOST_TEST(local_batch_size(256, 2) == 128);
  BOOST_TEST(local_batch_size(255, 3) == 85);
  BOOST_CHECK_EXCEPTION(local_batch_size(256, 3), UsageError, [](const UsageError& error) {
    const std::string text = error.what();
    return text.find("--batch-size 256") != std::string::npos &&
           text.find("divide evenly among the 3 ranks") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(shards_are_disjoint_complete_and_reshuffled_per_epoch) {
  const std::int64_t size = 1200;
  for (const int world : {1, 2, 3, 4}) {
    std::vector<std::vector<std::int64_t>> first_epoch;
    for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<std::int64_t> all;
      for (int rank = 0; rank < world; ++rank) {
        const auto shard = training_sampler(size, 7, rank, world).epoch_indices(epoch);
        BOOST_TEST(static_cast<std::int64_t>(shard.size()) == size / world);
        all.insert(all.end(), shard.begin(), shard.end());
        if (epoch == 0) first_epoch.push_back(shard);
        if (epoch == 1) {
          BOOST_TEST(shard != first_epoch[static_cast<std::size_t>(rank)],
                     "world " << world << " rank " << rank << " was not reshuffled");
        }
      }
      std::sort(all.begin(), all.end());
      const bool overlap = std::adjacent_find(all.begin(), all.end()) != all.end();
      BOOST_TEST(!overlap, "world " << world << ": shards overlap");
      BOOST_TEST(static_cast<std::int64_t>(all.size()) == size);
      BOOST_TEST(all.front() == 0);
      BOOST_TEST(all.back() == size - 1);
    }
  }
}

// Each rank computes its shard alone, from the seed: separately built samplers (as separate
// processes build them) agree, and the ranks' k-th batches form the single process's k-th
// global batch.
BOOST_AUTO_TEST_CASE(every_rank_derives_the_same_permutation_and_batches_match_one_process) {
  const std::int64_t size = 1000;
  const int world = 4;
  const std::int64_t global = 40;
  const std::int64_t local = local_batch_size(global, world);
  const auto single = training_sampler(size, 3, 0, 1).epoch_indices(5);
  for (int rank = 0; rank < world; ++rank) {
    const auto once = training_sampler(size, 3, rank, world).epoch_indices(5);
    const auto again = training_sampler(size, 3, rank, world).epoch_indices(5);
    BOOST_TEST(once == again, boost::test_tools::per_element());
  }
  for (std::int64_t batch = 0; batch < size / global; ++batch) {
    std::multiset<std::int64_t> together;
    for (int rank = 0; rank < world; ++rank) {
      const auto shard = training_sampler(size, 3, rank, world).epoch_indices(5);
      together.insert(shard.begin() + batch * local, shard.begin() + (batch + 1) * local);
    }
    const std::multiset<std::int64_t> want(single.begin() + batch * global,
                                           single.begin() + (batch + 1) * global);
    BOOST_TEST((together == want), "global batch " << batch);
  }
}

BOOST_AUTO_TEST_CASE(evaluation_shards_cover_the_test_set_once) {
  for (const int world : {1, 2, 3, 7}) {
    std::vector<std::int64_t> all;
    for (int rank = 0; rank < world; ++rank) {
      const auto shard = evaluation_shard(1001, rank, world);
      all.insert(all.end(), shard.begin(), shard.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> want(1001);
    for (std::size_t i = 0; i < want.size(); ++i)
      want[i] = static_cast<std::int64_t>(i);
    BOOST_TEST(all == want, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()
