#include "apps/train/overflow_monitor.h"

#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/round_trips.h"

using namespace alloy;
using namespace alloy::app;

namespace {

amp::LossScaleConfig dynamic_config(float init, float min) {
  amp::LossScaleConfig config;
  config.dynamic = true;
  config.init_scale = init;
  config.min_scale = min;
  config.max_scale = 1 << 24;
  config.window = 2000;
  return config;
}

// One step as the amp layer runs it: unscale's verdict, then the scaler's update.
void simulated_step(amp::LossScaler& scaler, int overflowing_gradient) {
  scaler.state().found_inf.data<float>()[0] = overflowing_gradient >= 0 ? 1.0f : 0.0f;
  scaler.state().first_overflow.data<std::int32_t>()[0] = overflowing_gradient;
  scaler.update();
}

std::string name_of(int index) {
  return "layer" + std::to_string(index) + ".weight";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(overflow_monitor)

BOOST_AUTO_TEST_CASE(one_warning_per_interval_names_the_first_overflow) {
  amp::LossScaler scaler(dynamic_config(1024.0f, 1.0f), Device::cpu());
  OverflowMonitor monitor(scaler, name_of, 5);
  int warnings = 0;
  std::string last;
  RoundTrips polls;
  for (int step = 1; step <= 10; ++step) {
    // Steps 2 and 3 overflow, in gradients 7 then 3: the warning names 7, the earlier step's.
    simulated_step(scaler, step == 2 ? 7 : step == 3 ? 3 : -1);
    const RoundTrips before = round_trips();
    if (auto warning = monitor.after_step(step)) {
      ++warnings;
      last = *warning;
      BOOST_TEST(step == 5);  // on the CPU a poll has arrived at once: read at its own step
    }
    polls += round_trips() - before;
  }
  BOOST_TEST(warnings == 1);
  // Two polls (steps 5 and 10), each one queued download and, as on a GPU, no host wait.
  BOOST_TEST(polls.downloads == 2u);
  BOOST_TEST(polls.host_waits == 0u);
  BOOST_TEST(polls.uploads == 0u);
  BOOST_TEST(last.find("2 of the last 5 steps skipped") != std::string::npos, last);
  BOOST_TEST(last.find("layer7.weight") != std::string::npos, last);
  BOOST_TEST(last.find("loss scale now 256") != std::string::npos, last);
  BOOST_TEST(!monitor.poll(10).has_value());  // nothing new since
}

// Data parallelism: a poll is read when the next falls due, on the CPU too (where it arrives at
// once), so that every replica reads it at the same step.
BOOST_AUTO_TEST_CASE(read_when_due_a_poll_is_read_an_interval_later) {
  amp::LossScaler scaler(dynamic_config(1024.0f, 1.0f), Device::cpu());
  OverflowMonitor monitor(scaler, name_of, 5);
  monitor.read_polls_when_due();
  std::vector<int> warned_at;
  std::string first;
  for (int step = 1; step <= 15; ++step) {
    simulated_step(scaler, step == 2 ? 7 : step == 7 ? 3 : -1);
    if (auto warning = monitor.after_step(step)) {
      warned_at.push_back(step);
      if (first.empty()) first = *warning;
    }
  }
  // Step 5's poll (step 2's overflow) is read at step 10, step 10's (step 7's) at step 15.
  BOOST_TEST(warned_at == (std::vector<int>{10, 15}), boost::test_tools::per_element());
  BOOST_TEST(
      first.find("gradient overflow: 1 of the last 5 steps skipped (first in layer7.weight)") == 0u,
      first);
}

BOOST_AUTO_TEST_CASE(read_when_due_the_divergence_rule_stops_an_interval_later) {
  amp::LossScaler scaler(dynamic_config(1e30f, 1.0f), Device::cpu());
  OverflowMonitor monitor(scaler, name_of, OverflowMonitor::kDefaultInterval, 4);
  monitor.read_polls_when_due();
  int stopped_at = 0;
  for (int step = 1; step <= 20 && stopped_at == 0; ++step) {
    simulated_step(scaler, 1);
    try {
      monitor.after_step(step);
    } catch (const TrainingDiverged& error) {
      stopped_at = step;
      BOOST_TEST(error.step() == 4);  // the poll's step: its counters
      BOOST_TEST(error.streak() == 4);
    }
  }
  BOOST_TEST(stopped_at == 8);  // queued at step 4, read when step 8's falls due
}

BOOST_AUTO_TEST_CASE(a_static_scale_is_never_polled) {
  amp::LossScaleConfig config;
  config.dynamic = false;
  config.static_scale = 128.0f;
  amp::LossScaler scaler(config, Device::cpu());
  OverflowMonitor monitor(scaler, name_of, 1);
  for (int step = 1; step <= 3; ++step)
    BOOST_TEST(!monitor.after_step(step).has_value());
}

BOOST_AUTO_TEST_CASE(overflows_at_the_minimum_scale_stop_training) {
  amp::LossScaler scaler(dynamic_config(4.0f, 1.0f), Device::cpu());
  OverflowMonitor monitor(scaler, name_of, 10);
  bool stopped = false;
  for (int step = 1; step <= 60 && !stopped; ++step) {
    simulated_step(scaler, 0);
    try {
      monitor.after_step(step);
    } catch (const Error& error) {
      stopped = true;
      const std::string message = error.what();
      BOOST_TEST(message.find("at its minimum 1") != std::string::npos, message);
      BOOST_TEST(message.find("layer0.weight") != std::string::npos, message);
      // Scale 4 -> 2 -> 1 takes two overflows; the streak at the minimum then needs 20 more.
      BOOST_TEST(step >= 2 + OverflowMonitor::kMaxStepsAtMinimum);
    }
  }
  BOOST_TEST(stopped);
}

// --max-consecutive-skips N: overflows in a row at any scale, far above the minimum.
BOOST_AUTO_TEST_CASE(max_consecutive_skips_stops_at_any_scale) {
  amp::LossScaler scaler(dynamic_config(1e30f, 1.0f), Device::cpu());
  OverflowMonitor monitor(scaler, name_of, OverflowMonitor::kDefaultInterval, 8);
  int stopped_at = 0;
  for (int step = 1; step <= 40 && stopped_at == 0; ++step) {
    simulated_step(scaler, step == 3 ? -1 : 2);  // one finite step breaks the streak
    try {
      monitor.after_step(step);
    } catch (const TrainingDiverged& error) {
      stopped_at = step;
      BOOST_TEST(error.streak() >= 8);
      BOOST_TEST(error.step() == step);  // on the CPU a poll is read at its own step
      const std::string message = error.what();
      BOOST_TEST(message.find("training diverged: the last ") == 0u, message);
      BOOST_TEST(message.find("max_consecutive_skips 8") != std::string::npos, message);
      BOOST_TEST(message.find("layer2.weight") != std::string::npos, message);
    }
  }
  // Polled every 8 steps: at step 8 the streak is 5 (steps 4-8), at step 16 it is 13.
  BOOST_TEST(stopped_at == 16);
  BOOST_TEST(scaler.snapshot().overflow_streak == 13);
}

BOOST_AUTO_TEST_CASE(zero_consecutive_skips_never_stops) {
  amp::LossScaler scaler(dynamic_config(4.0f, 1.0f), Device::cpu());
  OverflowMonitor monitor(scaler, name_of, 10, 0);
  for (int step = 1; step <= 100; ++step) {
    simulated_step(scaler, 0);
    BOOST_CHECK_NO_THROW(monitor.after_step(step));
  }
  BOOST_TEST(scaler.snapshot().at_min_streak == 98);
}

BOOST_AUTO_TEST_CASE(an_interval_must_be_positive) {
  amp::LossScaler scaler(dynamic_config(4.0f, 1.0f), Device::cpu());
  BOOST_CHECK_THROW(OverflowMonitor(scaler, name_of, 0), Error);
}

BOOST_AUTO_TEST_SUITE_END()
