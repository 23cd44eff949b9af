// The CPU test's claims on a GPU (trainer_round_trips_test.cpp): a CUDA training step makes
// the same host round trips as the same step on the CPU, counted at the same entry points
// (pinned batch uploads without a stream synchronise; one queued download for the overflow
// monitor's poll, read without a wait once it has arrived, and no upload for it after skipped
// steps), apart from back-pressure waits, and calls cudaMalloc no more after the warm-up.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "apps/train/overflow_monitor.h"
#include "core/cuda/allocator.h"
#include "tests/apps/step_round_trips.h"
#include "tests/support/gpu.h"

using namespace alloy;

namespace {

constexpr int kWarmUpSteps = 2;

class WarningLog : public app::TrainObserver {
 public:
  void on_warning(const std::string& message) override { warnings.push_back(message); }
  std::vector<std::string> warnings;
};

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
      // steps ahead of the device) is a wait the CPU cannot have: back-pressure, counted apart.
      BOOST_TEST(on_gpu.backpressure_waits ==
                 gpu[i].staging_busy_waits - gpu[i - 1].staging_busy_waits);
      on_gpu.host_waits -= on_gpu.backpressure_waits;
      on_gpu.backpressure_waits = 0;
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

// On the device, as on the CPU, the host never waits on the step: an O2 epoch's step loop,
// warm-up and polls included, waits for nothing but back-pressure. Every step overflows, so the
// polls take and report overflows; the emulator's deferred stream has each poll arrive a step after
// it was queued, and the monitor reads it then, without a wait.
BOOST_AUTO_TEST_CASE(an_o2_epoch_waits_for_nothing_but_back_pressure) {
  test::StepRunOptions run;
  run.model = "lenet";
  run.level = amp::OptLevel::O2;
  run.steps = 1000;  // the whole epoch
  run.train_examples = 2 * app::OverflowMonitor::kDefaultInterval * run.batch_size + 3;
  run.init_loss_scale = 1e30f;
  WarningLog log;
  const std::vector<test::StepCounts> counts =
      test::count_steps(Device::cuda(0), run, log, test::step_run_train_options(run));
  BOOST_REQUIRE(counts.size() == 51u);
  RoundTrips loop;
  for (const test::StepCounts& step : counts)
    loop += step.reported;
  BOOST_TEST_MESSAGE("  the epoch's steps: " << loop);
  BOOST_TEST(loop.host_waits == loop.backpressure_waits);
  BOOST_TEST(loop.backpressure_waits == counts.back().staging_busy_waits);
  BOOST_TEST(loop.downloads == 2u);  // the two polls, each one queued download
  // The first poll was read in the step loop; the second too unless it had not arrived by the
  // last step (then the epoch's end waited for it and reported it with the rest). Together
  // they report every step, once.
  BOOST_REQUIRE(log.warnings.size() >= 2u);
  BOOST_TEST(log.warnings[0].find("gradient overflow: 25 of the last 25 steps skipped") == 0u,
             log.warnings[0]);
  int skipped = 0;
  for (const std::string& warning : log.warnings) {
    BOOST_TEST_MESSAGE("  warning: " << warning);
    const std::string prefix = "gradient overflow: ";
    BOOST_TEST_REQUIRE(warning.rfind(prefix, 0) == 0u, warning);
    skipped += std::atoi(warning.c_str() + prefix.size());
  }
  BOOST_TEST(skipped == 51);
  // The emulator's stream runs at the first query, so there the second poll arrives a step
  // after it was queued, in the loop: the epoch's end reads the last step's alone.
  if (log.warnings.size() == 3u) {
    BOOST_TEST(log.warnings[2].find(" 1 of the last 1 steps skipped") != std::string::npos,
               log.warnings[2]);
  }
}

BOOST_AUTO_TEST_SUITE_END()
