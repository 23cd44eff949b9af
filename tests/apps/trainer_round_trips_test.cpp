// What a training step costs in host round trips (core/round_trips.h), shown on the CPU, whose
// backend counts at the same entry points as CUDA: a steady-state step of lenet and resnet18
// at O0-O3 uploads its batch (images and labels) and nothing else, downloads nothing except
// the overflow monitor's scale poll (every OverflowMonitor::kDefaultInterval steps with a
// dynamic scale: one queued download of the scaler's state, after skipped steps too), waits
// for nothing (the poll is read once it has arrived: a download without a wait, counted so on
// the CPU as on CUDA, core/queued_download.h), and allocates no new memory. The JSON log's
// epoch event reports the same counts.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "apps/cli/train_report.h"
#include "apps/train/overflow_monitor.h"
#include "tests/apps/step_round_trips.h"
#include "tests/support/process.h"

using namespace alloy;

namespace {

constexpr amp::OptLevel kLevels[] = {amp::OptLevel::O0, amp::OptLevel::O1, amp::OptLevel::O2,
                                     amp::OptLevel::O3};
// Steps before the steady state: the first allocates gradients, optimizer state and the
// staging of the batches; the second still fills the allocators' caches for the sizes that
// the first step's long-lived tensors took.
constexpr int kWarmUpSteps = 2;

bool polls(amp::OptLevel level, std::int64_t step) {
  return amp::resolve_properties(level, {}).loss_scale.dynamic &&
         step % app::OverflowMonitor::kDefaultInterval == 0;
}

// The steady-state claim for the steps after the warm-up.
void check_steady_state(const std::vector<test::StepCounts>& counts, amp::OptLevel level) {
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const auto step = static_cast<std::int64_t>(i + 1);
    if (i <= kWarmUpSteps || polls(level, step))
      BOOST_TEST_MESSAGE("  step " << step << ": " << counts[i].reported);
  }
  for (std::size_t i = kWarmUpSteps; i < counts.size(); ++i) {
    const auto step = static_cast<std::int64_t>(i + 1);
    const RoundTrips& measured = counts[i].measured;
    BOOST_TEST_CONTEXT("step " << step << ": " << measured) {
      BOOST_TEST(measured.uploads == 2u);  // the next batch's images and labels
      BOOST_TEST(measured.device_allocations == 0u);
      // No new memory: what the step holds at its end is what the step before held.
      BOOST_TEST(counts[i].bytes_in_use == counts[i - 1].bytes_in_use);
      // The scaler's state in one buffer, read in one download (amp/loss_scaler.h).
      BOOST_TEST(measured.downloads == (polls(level, step) ? 1u : 0u));
      BOOST_TEST(measured.host_waits == 0u);          // the poll's included
      BOOST_TEST(measured.backpressure_waits == 0u);  // the CPU's stager never waits
      // The trainer's own count is the same.
      BOOST_TEST(counts[i].reported == measured);
    }
  }
}

std::int64_t json_integer(const std::string& line, const std::string& key) {
  const std::string pattern = "\"" + key + "\":";
  const std::size_t at = line.find(pattern);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, "no " << key << " in " << line);
  return std::atoll(line.c_str() + at + pattern.size());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(trainer_round_trips)

BOOST_AUTO_TEST_CASE(lenet_steps_upload_the_batch_and_poll_the_scale_only) {
  for (const amp::OptLevel level : kLevels) {
    BOOST_TEST_CONTEXT("lenet " << amp::opt_level_name(level)) {
      test::StepRunOptions run;
      run.model = "lenet";
      run.level = level;
      run.steps = 27;  // past the first scale poll
      const std::vector<test::StepCounts> counts = test::count_steps(Device::cpu(), run);
      BOOST_REQUIRE(counts.size() == static_cast<std::size_t>(run.steps));
      check_steady_state(counts, level);
      BOOST_TEST(counts[0].measured.uploads == 4u);  // the first batch's and the second's
    }
  }
}

// Gradient accumulation's micro-batches are views of the staged batch: a step of 4 of them
// costs what one pass costs, at every level.
BOOST_AUTO_TEST_CASE(accumulating_steps_upload_the_batch_and_poll_the_scale_only) {
  for (const amp::OptLevel level : kLevels) {
    BOOST_TEST_CONTEXT("lenet " << amp::opt_level_name(level) << " in 4 micro-batches") {
      test::StepRunOptions run;
      run.model = "lenet";
      run.level = level;
      run.steps = 27;  // past the first scale poll
      run.accumulation_steps = 4;
      const std::vector<test::StepCounts> counts = test::count_steps(Device::cpu(), run);
      BOOST_REQUIRE(counts.size() == static_cast<std::size_t>(run.steps));
      check_steady_state(counts, level);
    }
  }
}

BOOST_AUTO_TEST_CASE(resnet18_steps_upload_the_batch_only) {
  for (const amp::OptLevel level : kLevels) {
    BOOST_TEST_CONTEXT("resnet18 " << amp::opt_level_name(level)) {
      test::StepRunOptions run;
      run.model = "resnet18";
      run.level = level;
      run.steps = 4;
      run.batch_size = 2;
      const std::vector<test::StepCounts> counts = test::count_steps(Device::cpu(), run);
      BOOST_REQUIRE(counts.size() == static_cast<std::size_t>(run.steps));
      check_steady_state(counts, level);
    }
  }
}

class WarningLog : public app::TrainObserver {
 public:
  void on_warning(const std::string& message) override { warnings.push_back(message); }
  std::vector<std::string> warnings;
};

// Every step overflows: the poll then also takes the gradient that overflowed first (for the
// warning) and resets it on the device, still within its one download and no upload.
BOOST_AUTO_TEST_CASE(a_poll_after_skipped_steps_is_one_download_too) {
  test::StepRunOptions run;
  run.level = amp::OptLevel::O2;
  run.steps = 27;               // past the first scale poll
  run.init_loss_scale = 1e30f;  // every half gradient overflows for the steps run
  WarningLog log;
  const std::vector<test::StepCounts> counts =
      test::count_steps(Device::cpu(), run, log, test::step_run_train_options(run));
  BOOST_REQUIRE(counts.size() == static_cast<std::size_t>(run.steps));
  check_steady_state(counts, run.level);
  const std::int64_t poll = app::OverflowMonitor::kDefaultInterval;
  BOOST_TEST_MESSAGE("  poll at step " << poll << ": " << counts[poll - 1].measured);
  BOOST_REQUIRE(log.warnings.size() == 1u);
  const std::string& warning = log.warnings.front();
  BOOST_TEST(warning.find("25 of the last 25 steps skipped (first in ") != std::string::npos,
             warning);
}

// The counts can fail: a step that keeps one more tensor alive each time allocates.
BOOST_AUTO_TEST_CASE(a_step_that_allocates_is_seen) {
  std::vector<Tensor> kept;
  test::StepRunOptions run;
  run.steps = 4;
  run.sample = [&kept] {
    kept.push_back(Tensor::empty({1 << 16}, DType::f32));  // 256 KiB: a cached size
    return std::int64_t{0};
  };
  const std::vector<test::StepCounts> counts = test::count_steps(Device::cpu(), run);
  BOOST_REQUIRE(counts.size() == 4u);
  // The hook's allocation lands between two measurements: seen in the memory held.
  for (std::size_t i = 1; i < counts.size(); ++i)
    BOOST_TEST(counts[i].bytes_in_use == counts[i - 1].bytes_in_use + (std::int64_t{1} << 18));
  release_host_cache();  // nothing cached: a block of a cached size is a new one
  const RoundTrips before = round_trips();
  kept.push_back(Tensor::empty({1 << 17}, DType::f32));
  BOOST_TEST((round_trips() - before).device_allocations == 1u);
}

// The host never waits on the step, so it can queue the device's work ahead: an O2 step loop
// waits for no result, the warm-up steps and the overflow monitor's polls included. On the CPU
// nothing waits at all (no back-pressure either); the GPU twin allows back-pressure only.
BOOST_AUTO_TEST_CASE(an_o2_epoch_makes_no_host_wait) {
  test::StepRunOptions run;
  run.level = amp::OptLevel::O2;
  run.steps = 1000;  // the whole epoch
  run.train_examples = 2 * app::OverflowMonitor::kDefaultInterval * run.batch_size + 3;  // 2 polls
  run.init_loss_scale = 1e30f;  // skipped steps: the polls find overflows to take and report
  WarningLog log;
  const std::vector<test::StepCounts> counts =
      test::count_steps(Device::cpu(), run, log, test::step_run_train_options(run));
  BOOST_REQUIRE(counts.size() == 51u);
  RoundTrips loop;
  for (const test::StepCounts& step : counts)
    loop += step.reported;
  BOOST_TEST_MESSAGE("  the epoch's steps: " << loop);
  BOOST_TEST(loop.host_waits == 0u);
  BOOST_TEST(loop.backpressure_waits == 0u);
  BOOST_TEST(loop.downloads == 2u);       // the two polls, each one queued download
  BOOST_TEST(log.warnings.size() == 3u);  // the two polls' and the epoch end's
}

BOOST_AUTO_TEST_CASE(the_epoch_event_reports_the_steps_counts) {
  const test::TempDir dir;
  const std::string log = dir.path() + "/log.jsonl";
  test::StepRunOptions run;
  run.level = amp::OptLevel::O2;
  run.steps = 1000;  // never stops early: the whole epoch
  run.train_examples = 27 * run.batch_size;
  app::TrainOptions options;
  static_cast<app::TrainConfig&>(options) = test::step_run_train_options(run);
  options.log_json = log;
  std::vector<test::StepCounts> counts;
  {
    app::TrainReport report(options);
    counts = test::count_steps(Device::cpu(), run, report, options);
  }
  BOOST_REQUIRE(counts.size() == 27u);
  RoundTrips reported;
  RoundTrips measured = counts[0].reported;  // the first step's measure includes the setup
  for (std::size_t i = 0; i < counts.size(); ++i) {
    reported += counts[i].reported;
    if (i > 0) measured += counts[i].measured;
  }
  BOOST_TEST(reported == measured);
  BOOST_TEST(reported.uploads == 2u * counts.size());  // every batch once
  BOOST_TEST(reported.downloads > 0u);                 // the scale poll at step 25

  std::ifstream in(log);
  std::string line;
  std::string epoch;
  while (std::getline(in, line))
    if (line.find("\"event\":\"epoch\"") != std::string::npos) epoch = line;
  BOOST_REQUIRE_MESSAGE(!epoch.empty(), "no epoch event in " << log);
  BOOST_TEST(json_integer(epoch, "uploads") == static_cast<std::int64_t>(reported.uploads));
  BOOST_TEST(json_integer(epoch, "downloads") == static_cast<std::int64_t>(reported.downloads));
  BOOST_TEST(json_integer(epoch, "host_waits") == static_cast<std::int64_t>(reported.host_waits));
  BOOST_TEST(json_integer(epoch, "backpressure_waits") ==
             static_cast<std::int64_t>(reported.backpressure_waits));
  BOOST_TEST(json_integer(epoch, "device_allocations") ==
             static_cast<std::int64_t>(reported.device_allocations));
}

BOOST_AUTO_TEST_SUITE_END()
