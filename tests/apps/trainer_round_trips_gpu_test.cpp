// The CPU test's claims on a GPU (trainer_round_trips_test.cpp): a CUDA training step makes
// the same host round trips as the same step on the CPU, counted at the same entry points
// (pinned batch uploads without a stream synchronise; one download for the overflow monitor's
// poll, and no upload for it after skipped steps), and calls cudaMalloc no more after the
// warm-up.
#include <boost/test/unit_test.hpp>

#include "core/cuda/allocator.h"
#include "tests/apps/step_round_trips.h"
#include "tests/support/gpu.h"

using namespace alloy;

namespace {

constexpr int kWarmUpSteps = 2;

void check_same_as_cpu(const test::StepRunOptions& base) {
  test::StepRunOptions run = base;
  const std::vector<test::StepCounts> cpu = test::count_steps(Device::cpu(), run);
  run.sample = [] { return cuda::cache_statistics(0).malloc_calls; };
  const std::vector<test::StepCounts> gpu = test::count_steps(Device::cuda(0), run);
  BOOST_REQUIRE(cpu.size() == static_cast<std::size_t>(run.steps));
  BOOST_REQUIRE(gpu.size() == cpu.size());
  for (std::size_t i = kWarmUpSteps; i < gpu.size(); ++i) {
    BOOST_TEST_CONTEXT("step " << i + 1 << ": cuda " << gpu[i].measured << "; cpu "
                               << cpu[i].measured) {
      RoundTrips on_gpu = gpu[i].measured;
      // A staging buffer still being uploaded when the host comes back to it (the host ran two
      // steps ahead of the device) is a wait the CPU cannot have: it is reported on its own.
      on_gpu.host_waits -= gpu[i].staging_busy_waits - gpu[i - 1].staging_busy_waits;
      BOOST_TEST(on_gpu == cpu[i].measured);
      BOOST_TEST(gpu[i].extra == gpu[i - 1].extra);  // no cudaMalloc
      BOOST_TEST(gpu[i].bytes_in_use == gpu[i - 1].bytes_in_use);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(trainer_round_trips_gpu)

BOOST_AUTO_TEST_CASE(lenet_o2_steps_cost_on_cuda_what_they_cost_on_the_cpu) {
  test::StepRunOptions run;
  run.model = "lenet";
  run.level = amp::OptLevel::O2;
  run.steps = 27;  // past the first scale poll
  check_same_as_cpu(run);
}

// Every step overflows, so the poll at step 25 also takes the first overflow and resets it on
// the device: by device work, not an upload the CPU would not count.
BOOST_AUTO_TEST_CASE(lenet_o2_overflowing_steps_cost_on_cuda_what_they_cost_on_the_cpu) {
  test::StepRunOptions run;
  run.model = "lenet";
  run.level = amp::OptLevel::O2;
  run.steps = 27;
  run.init_loss_scale = 1e30f;
  check_same_as_cpu(run);
}

// Micro-batches are views of the staged batch: a step accumulating 4 of them uploads, downloads
// and waits for what one pass does, on the GPU as on the CPU.
BOOST_AUTO_TEST_CASE(mlp_o2_accumulating_steps_cost_on_cuda_what_they_cost_on_the_cpu) {
  test::StepRunOptions run;
  run.model = "mlp";
  run.level = amp::OptLevel::O2;
  run.steps = 27;  // past the first scale poll
  run.accumulation_steps = 4;
  check_same_as_cpu(run);
}

BOOST_AUTO_TEST_CASE(resnet18_o2_steps_cost_on_cuda_what_they_cost_on_the_cpu) {
  test::StepRunOptions run;
  run.model = "resnet18";
  run.level = amp::OptLevel::O2;
  run.steps = 5;
  run.batch_size = 2;
  check_same_as_cpu(run);
}

BOOST_AUTO_TEST_SUITE_END()
