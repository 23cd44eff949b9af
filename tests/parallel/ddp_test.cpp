// The pure parts of data parallelism: bucket assignment and order, the bucket layout (one plan
// for the CPU and the device), the predivide and postdivide factors, the split of the global
// batch, and the sampler's shards (disjoint, complete, reshuffled per epoch, the same on every
// rank).
#include "parallel/ddp.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <set>

#include "apps/cli/train_options.h"
#include "apps/train/data_parallel.h"
#include "core/error.h"
#include "core/models/models.h"
#include "core/random.h"
#include "parallel/distributed_sampler.h"
#include "parallel/gloo_process_group.h"
#include "tests/parallel/forked.h"

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

BOOST_AUTO_TEST_CASE(the_first_bucket_of_each_dtype_closes_at_the_first_cap) {
  // 400 bytes each; cap 1200, first cap 400: the first bucket holds one parameter.
  BOOST_TEST(members(assign_buckets(f32_slots({100, 100, 100, 100, 100, 100}), 1200, 400)) ==
             "{5} {4 3 2} {1 0}");
  // A first cap above the cap is the cap.
  BOOST_TEST(members(assign_buckets(f32_slots({100, 100, 100, 100}), 800, 4000)) == "{3 2} {1 0}");
  // Per dtype: the f32 parameters' first bucket is their own first.
  const std::vector<GradientSlot> slots{{DType::f32, 100},
                                        {DType::f32, 100},
                                        {DType::f16, 200},
                                        {DType::f16, 200},
                                        {DType::f32, 100}};
  BOOST_TEST(members(assign_buckets(slots, 800, 400)) == "{4} {3} {2} {1 0}");
}

// --bucket-cap-mb through the command line's options: resnet18's buckets (reverse registration
// order) close at 1 MiB for the first and at the cap for the others.
BOOST_AUTO_TEST_CASE(bucket_boundaries_follow_bucket_cap_mb_after_a_1_mb_first_bucket) {
  Generator generator(1);
  auto model = models::make_model("resnet18", generator, 10);
  const auto params = model->parameters();
  for (const double cap_mb : {2.0, 4.5, 25.0}) {
    BOOST_TEST_CONTEXT("--bucket-cap-mb " << cap_mb) {
      const DdpOptions options =
          app::ddp_options(app::parse_train_options({"--bucket-cap-mb", std::to_string(cap_mb)}));
      const std::size_t cap = static_cast<std::size_t>(cap_mb * 1024 * 1024);
      BOOST_TEST(options.bucket_bytes == cap);
      const BucketPlan plan =
          plan_buckets(gradient_slots(params), options.bucket_bytes, options.first_bucket_bytes);
      BOOST_TEST_MESSAGE("resnet18, --bucket-cap-mb " << cap_mb << ": " << plan.buckets.size()
                                                      << " buckets, the first of "
                                                      << plan.buckets.front().bytes << " bytes");
      BOOST_TEST_REQUIRE(plan.buckets.size() >= 2u);
      for (std::size_t b = 0; b + 1 < plan.buckets.size(); ++b) {
        const Bucket& bucket = plan.buckets[b];
        const std::size_t limit = b == 0 ? std::size_t{1} << 20 : cap;
        const std::size_t last_bytes =
            params[static_cast<std::size_t>(bucket.params.back())]->value.nbytes();
        BOOST_TEST(bucket.bytes >= limit, "bucket " << b);
        BOOST_TEST(bucket.bytes - last_bytes < limit, "bucket " << b);
      }
      BOOST_TEST(plan.buckets.back().bytes < cap);
    }
  }
  BOOST_CHECK_THROW(app::parse_train_options({"--bucket-cap-mb", "0"}), UsageError);
  BOOST_CHECK_THROW(app::parse_train_options({"--bucket-cap-mb", "-3"}), UsageError);
}

BOOST_AUTO_TEST_CASE(predivide_factor_is_the_power_of_two_nearest_sqrt_world) {
  BOOST_TEST(predivide_factor(1) == 1.0f);
  for (const int world : {2, 3, 4, 7})
    BOOST_TEST(predivide_factor(world) == 2.0f, "world " << world);
  for (const int world : {8, 16, 31})
    BOOST_TEST(predivide_factor(world) == 4.0f, "world " << world);
  BOOST_TEST(predivide_factor(64) == 8.0f);
}

BOOST_AUTO_TEST_CASE(predivide_and_postdivide_for_worlds_1_to_8) {
  const std::vector<float> pre{1, 2, 2, 2, 2, 2, 2, 4};  // worlds 1..8
  for (int world = 1; world <= 8; ++world) {
    const float p = predivide_factor(world);
    BOOST_TEST(p == pre[static_cast<std::size_t>(world - 1)], "world " << world);
    BOOST_TEST(postdivide_factor(world) == p / static_cast<float>(world), "world " << world);
    // 1/p is a power of two: the two scalings together are exactly float(1 / world).
    BOOST_TEST((1.0f / p) * postdivide_factor(world) == 1.0f / static_cast<float>(world),
               "world " << world);
    BOOST_TEST(std::ldexp(1.0f / p, std::ilogb(p)) == 1.0f, "world " << world);
    // An average through them: exact for worlds that are powers of two (both factors are);
    // otherwise p/world is rounded once, so the result is within a unit in the last place of
    // sum / world.
    const bool power_of_two = (world & (world - 1)) == 0;
    for (const float sum : {2.625f, 0.1f, 1000.5f, 3.0f * static_cast<float>(world)}) {
      const float through = sum * (1.0f / p) * postdivide_factor(world);
      const float divided = sum / static_cast<float>(world);
      if (power_of_two) {
        BOOST_TEST(through == divided, "world " << world << " sum " << sum);
      } else {
        BOOST_TEST(std::fabs(through - divided) <= std::ldexp(std::fabs(divided), -23),
                   "world " << world << " sum " << sum);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(bucket_layout)

BOOST_AUTO_TEST_CASE(members_are_packed_back_to_back_in_bucket_order) {
  const std::vector<GradientSlot> slots{{DType::f16, 100}, {DType::f32, 10}, {DType::f32, 7},
                                        {DType::f16, 50},  {DType::f32, 3},  {DType::f16, 9}};
  const BucketPlan plan = plan_buckets(slots, 400);
  BOOST_TEST_REQUIRE(plan.layouts.size() == plan.buckets.size());
  // Neither bucket fills; the f32 one is ready first (its last member, 1, comes before 0).
  BOOST_TEST(members(plan.buckets) == "{4 2 1} {5 3 0}");
  // {4 2 1}: 3, 7, 10 elements of f32; {5 3 0}: 9, 50, 100 elements of f16.
  BOOST_TEST(plan.layouts[0].offsets == (std::vector<std::int64_t>{0, 3, 10}),
             boost::test_tools::per_element());
  BOOST_TEST(plan.layouts[0].numel == 20);
  BOOST_TEST(plan.layouts[1].offsets == (std::vector<std::int64_t>{0, 9, 59}),
             boost::test_tools::per_element());
  BOOST_TEST(plan.layouts[1].numel == 159);
  for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
    const auto numel = static_cast<std::size_t>(plan.layouts[b].numel);
    BOOST_TEST(numel * dtype_size(plan.buckets[b].dtype) == plan.buckets[b].bytes);
  }
}

BOOST_AUTO_TEST_CASE(a_bucket_with_a_member_of_another_dtype_is_refused) {
  const std::vector<GradientSlot> slots{{DType::f16, 4}, {DType::f32, 4}};
  Bucket bucket;
  bucket.dtype = DType::f16;
  bucket.params = {1, 0};
  BOOST_CHECK_EXCEPTION(layout_bucket(bucket, slots), Error, [](const Error& error) {
    return std::string(error.what()).find("parameter 1 is f32 in a f16 bucket") !=
           std::string::npos;
  });
}

// The plan depends on dtypes and sizes only: the same model, wherever it lives, has the same
// buckets and layouts. The object that reduces (here on the CPU, over a world of one) holds
// exactly that plan, and flat buffers of the layout's length (f32 for half gradients reduced
// in fp32). tests/parallel/ddp_nccl_gpu_test.cpp checks the device twin against this plan.
BOOST_AUTO_TEST_CASE(the_reducing_object_holds_the_plan_of_its_parameters) {
  Generator generator(3);
  auto model = models::make_model("lenet", generator, 10);
  model->cast_parameters(DType::f16, true);
  const std::vector<nn::Parameter*> params = model->parameters();
  const BucketPlan want = plan_buckets(gradient_slots(params), 4096);
  BOOST_TEST(want.buckets.size() >= 3u);
  GlooProcessGroup group(0, 1, "127.0.0.1", test::free_port());
  for (const bool fp32 : {false, true}) {
    DdpOptions options;
    options.bucket_bytes = 4096;
    options.allreduce_fp32 = fp32;
    DistributedDataParallel ddp(*model, group, options);
    const BucketPlan& got = ddp.plan();
    BOOST_TEST_REQUIRE(got.buckets.size() == want.buckets.size());
    for (std::size_t b = 0; b < want.buckets.size(); ++b) {
      BOOST_TEST(got.buckets[b].params == want.buckets[b].params, boost::test_tools::per_element());
      BOOST_TEST(got.layouts[b].offsets == want.layouts[b].offsets,
                 boost::test_tools::per_element());
      const Tensor& flat = ddp.bucket_buffers()[b];
      BOOST_TEST(flat.numel() == want.layouts[b].numel);
      const DType reduced =
          fp32 && is_half(want.buckets[b].dtype) ? DType::f32 : want.buckets[b].dtype;
      BOOST_TEST((flat.dtype() == reduced), "bucket " << b << " fp32 " << fp32);
      BOOST_TEST(flat.device().is_cpu());
    }
  }
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
