// DistributedDataParallel with every rank a forked child process on 127.0.0.1: the start-up
// broadcast, gradient averaging in fp32 and half precision (with and without
// --allreduce-fp32), no_sync accumulation, and the overlap of allreduce with backward.
#include "parallel/ddp.h"

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>

#include "core/digest.h"
#include "core/half.h"
#include "core/models/models.h"
#include "core/random.h"
#include "parallel/gloo_process_group.h"
#include "tests/parallel/forked.h"

using namespace alloy;
using namespace alloy::parallel;
using alloy::test::check_all_succeeded;
using alloy::test::expect;
using alloy::test::free_port;
using alloy::test::run_ranks;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kHost = "127.0.0.1";

ProcessGroupOptions test_options() {
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(20);
  return options;
}

std::unique_ptr<nn::Module> make(const std::string& name, std::uint64_t seed) {
  Generator generator(seed);
  auto model = models::make_model(name, generator, 10);
  model->set_needs_input_grad(false);
  return model;
}

// A batch of images and an upstream gradient that differ from rank to rank.
struct Batch {
  Tensor images;
  Tensor dlogits;
};

Batch batch_of(int rank, std::int64_t size, DType dtype) {
  std::mt19937 generator(static_cast<unsigned>(rank) * 31u + 17u);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> images(static_cast<std::size_t>(size * 28 * 28));
  for (float& value : images)
    value = uniform(generator);
  std::vector<float> dlogits(static_cast<std::size_t>(size * 10));
  for (float& value : dlogits)
    value = uniform(generator) / static_cast<float>(size);
  return {Tensor::from_floats({size, 1, 28, 28}, images, dtype),
          Tensor::from_floats({size, 10}, dlogits, dtype)};
}

void forward_backward(nn::Module& model, const Batch& batch) {
  model.forward(batch.images);
  model.backward(batch.dlogits);
}

// Every gradient of the model, concatenated, as floats.
std::vector<float> gradients(nn::Module& model) {
  std::vector<float> all;
  for (const nn::Parameter* param : model.parameters()) {
    const std::vector<float> values = param->grad.to_floats();
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

std::string bytes_of(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

std::vector<float> floats_of(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// Each rank accumulates two backwards of its own batch under no_sync (no reduction: the ranks'
// gradients differ), then a third with synchronisation: every rank must end with the mean
// over ranks of its three-backward sums, within `tolerance` (relative to the largest value).
void check_accumulate_then_average(int world, DType dtype, bool allreduce_fp32, double tolerance,
                                   std::size_t bucket_bytes) {
  const int port = free_port();
  check_all_succeeded(run_ranks(world, [&](int rank) {
    GlooProcessGroup group(rank, world, kHost, port, test_options());
    auto model = make("mlp", 5);
    if (dtype != DType::f32) model->cast_parameters(dtype, /*keep_norm_fp32=*/false);
    model->zero_grad();
    DdpOptions options;
    options.bucket_bytes = bucket_bytes;
    options.allreduce_fp32 = allreduce_fp32;
    DistributedDataParallel ddp(*model, group, options);
    const Batch batch = batch_of(rank, 16, dtype);
    {
      auto guard = ddp.no_sync();
      forward_backward(*model, batch);
      ddp.finish();  // does nothing inside no_sync
      forward_backward(*model, batch);
      ddp.finish();
    }
    const std::vector<float> local = gradients(*model);
    const auto all_local = group.allgather_bytes(bytes_of(local));
    bool ranks_differ = false;
    for (const std::string& theirs : all_local)
      ranks_differ |= theirs != all_local[0];
    expect(ranks_differ, "gradients were reduced inside no_sync");
    // The third backward adds half of what two added: compute what it will add.
    const std::vector<float> one = [&] {
      auto copy = make("mlp", 5);
      if (dtype != DType::f32) copy->cast_parameters(dtype, false);
      copy->zero_grad();
      forward_backward(*copy, batch);
      return gradients(*copy);
    }();
    forward_backward(*model, batch);
    ddp.finish();
    const std::vector<float> got = gradients(*model);
    const auto all_one = group.allgather_bytes(bytes_of(one));
    std::vector<double> want(got.size(), 0.0);
    double largest = 0;
    for (int other = 0; other < world; ++other) {
      const auto two = floats_of(all_local[static_cast<std::size_t>(other)]);
      const auto three = floats_of(all_one[static_cast<std::size_t>(other)]);
      for (std::size_t i = 0; i < want.size(); ++i) {
        // The model's own accumulation rounds to its dtype, as the rank did.
        const float sum = two[i] + three[i];
        want[i] += dtype == DType::f16 ? round_to_half(sum) : sum;
      }
    }
    for (double& value : want) {
      value /= world;
      largest = std::max(largest, std::abs(value));
    }
    std::size_t wrong = 0;
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double error = std::abs(got[i] - want[i]);
      worst = std::max(worst, error / largest);
      wrong += error > tolerance * largest;
    }
    expect(wrong == 0, std::to_string(wrong) + " of " + std::to_string(got.size()) +
                           " gradients are not the mean; worst relative error " +
                           std::to_string(worst));
    // Every rank holds the same bits.
    const auto all_got = group.allgather_bytes(bytes_of(got));
    for (const std::string& theirs : all_got)
      expect(theirs == all_got[0], "ranks hold different averaged gradients");
  }));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ddp)

BOOST_AUTO_TEST_CASE(start_up_broadcast_gives_every_rank_the_weights_of_rank_0) {
  const int world = 3;
  const int port = free_port();
  check_all_succeeded(run_ranks(world, [&](int rank) {
    GlooProcessGroup group(rank, world, kHost, port, test_options());
    auto model = make("lenet", static_cast<std::uint64_t>(rank) + 1);  // different on each rank
    auto reference = make("lenet", 1);                                 // rank 0's
    DistributedDataParallel ddp(*model, group);
    expect(
        rank == 0 || params_digest(model->parameters()) != params_digest(reference->parameters()),
        "the ranks started equal");
    ddp.broadcast_from_rank0();
    expect(params_digest(model->parameters()) == params_digest(reference->parameters()),
           "rank " + std::to_string(rank) + " does not hold rank 0's weights");
  }));
}

BOOST_AUTO_TEST_CASE(fp32_gradients_are_averaged_after_no_sync_accumulation) {
  // One bucket, then many small ones (one per parameter or two).
  check_accumulate_then_average(2, DType::f32, false, 1e-6, kDefaultBucketBytes);
  check_accumulate_then_average(3, DType::f32, false, 1e-6, 1024);
}

BOOST_AUTO_TEST_CASE(half_gradients_are_averaged_in_half_or_in_fp32) {
  // Summed in fp16 after a predivide: a few fp16 roundings, relative to the largest gradient.
  check_accumulate_then_average(2, DType::f16, false, 2e-3, 4096);
  check_accumulate_then_average(4, DType::f16, false, 4e-3, kDefaultBucketBytes);
  // Widened, averaged in fp32 and rounded once.
  check_accumulate_then_average(3, DType::f16, true, 1e-3, 4096);
  check_accumulate_then_average(2, DType::bf16, false, 2e-2, 4096);
}

BOOST_AUTO_TEST_CASE(a_half_sum_that_would_overflow_fp16_is_kept_in_range_by_the_predivide) {
  // 4 ranks each holding 30000 (fp16 max 65504): a plain sum overflows; divided by 2 first
  // the partial sums stay below 65504 and the mean comes out exact.
  const int world = 4;
  const int port = free_port();
  check_all_succeeded(run_ranks(world, [&](int rank) {
    GlooProcessGroup group(rank, world, kHost, port, test_options());
    auto model = make("mlp", 5);
    model->cast_parameters(DType::f16, false);
    model->zero_grad();
    DistributedDataParallel ddp(*model, group);
    for (nn::Parameter* param : model->parameters()) {
      param->grad.copy_from_floats(
          std::vector<float>(static_cast<std::size_t>(param->grad.numel()), 30000.0f));
    }
    ddp.finish();  // no backward ran: every bucket is reduced as it stands
    for (const float value : gradients(*model))
      expect(value == 30000.0f, "got " + std::to_string(value) + ", want 30000");
  }));
}

// The first bucket (the last layers' gradients) is reduced while backward is still working on
// the first layers: its allreduce starts before backward returns.
BOOST_AUTO_TEST_CASE(a_bucket_allreduce_starts_before_backward_ends) {
  const int world = 2;
  const int port = free_port();
  check_all_succeeded(run_ranks(world, [&](int rank) {
    GlooProcessGroup group(rank, world, kHost, port, test_options());
    auto model = make("lenet", 1);
    model->zero_grad();
    DdpOptions options;
    options.bucket_bytes = 64 * 1024;  // lenet's 0.5 MB of gradients in several buckets
    DistributedDataParallel ddp(*model, group, options);
    expect(ddp.buckets().size() >= 3, "too few buckets");
    const Batch batch = batch_of(rank, 64, DType::f32);
    // A busy machine may keep the communication thread off a core for the whole of one
    // backward (tens of ms): of three steps, taken by both ranks alike, one must overlap.
    constexpr int kSteps = 3;
    bool overlapped = false;
    std::string late;
    for (int step = 0; step < kSteps; ++step) {
      model->zero_grad();
      model->forward(batch.images);
      const auto backward_start = Clock::now();
      model->backward(batch.dlogits);
      const auto backward_end = Clock::now();
      ddp.finish();
      const auto finish_end = Clock::now();
      const auto timings = ddp.last_timings();
      const auto ms = [&](Clock::time_point t) {
        return std::chrono::duration<double, std::milli>(t - backward_start).count();
      };
      if (rank == 0 && step == 0) {
        std::cout << "overlap trace (ms from the start of backward; backward ended at "
                  << ms(backward_end) << ", finish returned at " << ms(finish_end) << "):\n";
        for (const BucketTiming& timing : timings) {
          std::cout << "  bucket " << timing.bucket << " ("
                    << ddp.buckets()[static_cast<std::size_t>(timing.bucket)].bytes
                    << " bytes): ready " << ms(timing.ready) << ", allreduce " << ms(timing.started)
                    << " .. " << ms(timing.finished) << "\n";
        }
        std::cout.flush();
      }
      expect(timings.size() == ddp.buckets().size(), "no timing for every bucket");
      for (std::size_t b = 1; b < timings.size(); ++b)
        expect(timings[b].started >= timings[b - 1].finished, "buckets reduced out of order");
      if (timings.front().started < backward_end) {
        overlapped = true;
      } else {
        late = std::to_string(ms(timings.front().started)) + " ms after backward began, after " +
               "it ended at " + std::to_string(ms(backward_end));
      }
    }
    expect(overlapped, "in none of " + std::to_string(kSteps) +
                           " steps did the first bucket's allreduce start before backward ended "
                           "(the last: " +
                           late + ")");
  }));
}

BOOST_AUTO_TEST_SUITE_END()
