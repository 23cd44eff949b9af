// The overflow monitor on a CUDA scaler (apps/train/overflow_monitor.h): a poll queues its download
// and the step loop never waits for it; the monitor reads it once it has arrived, with the counters
// of the step it was queued at, and the epoch's end waits for a poll still in flight. A host
// function holds the device's stream, so that a poll is still in flight when the host asks, on a
// GPU as on the emulator (whose deferred stream would otherwise run at the first query).
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "apps/train/overflow_monitor.h"
#include "core/round_trips.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#endif

using namespace alloy;
using namespace alloy::app;

BOOST_AUTO_TEST_SUITE(overflow_monitor_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

amp::LossScaleConfig dynamic_config(float init) {
  amp::LossScaleConfig config;
  config.dynamic = true;
  config.init_scale = init;
  config.min_scale = 1.0f;
  config.max_scale = 1 << 24;
  config.window = 2000;
  return config;
}

// One step as the amp layer runs it, all device work: unscale's verdict, the scaler's update.
void device_step(amp::LossScaler& scaler, int overflowing_gradient) {
  scaler.state().found_inf.fill(overflowing_gradient >= 0 ? 1.0f : 0.0f);
  scaler.state().first_overflow.fill(static_cast<float>(overflowing_gradient));
  scaler.update();
}

std::string name_of(int index) {
  return "layer" + std::to_string(index) + ".weight";
}

void CUDART_CB hold_the_stream(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

void hold(Device device) {
  ALLOY_CUDA_CHECK(cudaLaunchHostFunc(cuda::stream_of(device), hold_the_stream, nullptr),
                   "holding the stream");
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_poll_is_read_once_arrived_without_a_host_wait) {
  const Device device = Device::cuda(0);
  amp::LossScaler scaler(dynamic_config(1024.0f), device);
  OverflowMonitor monitor(scaler, name_of, 5);
  const RoundTrips before = round_trips();
  for (int step = 1; step <= 4; ++step) {
    device_step(scaler, step == 2 ? 7 : step == 3 ? 3 : -1);
    BOOST_TEST(!monitor.after_step(step).has_value());
  }
  hold(device);
  device_step(scaler, -1);
  BOOST_TEST(!monitor.after_step(5).has_value());  // queued behind the held stream
  BOOST_TEST((round_trips() - before).downloads == 1u);
  // Steps after the poll overflow again: what the poll reads is step 5's.
  std::optional<std::string> warning;
  int step = 5;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!warning && std::chrono::steady_clock::now() < deadline) {
    ++step;
    device_step(scaler, step == 6 ? 4 : -1);
    warning = monitor.after_step(step);
  }
  const RoundTrips loop = round_trips() - before;
  BOOST_TEST(loop.host_waits == 0u, loop);
  BOOST_REQUIRE(warning.has_value());
  BOOST_TEST(step > 5);
  BOOST_TEST(*warning ==
             "gradient overflow: 2 of the last 5 steps skipped (first in layer7.weight); loss "
             "scale now 256");
  // The epoch's end: waits for a poll still in flight (queued at step 10 when the first
  // arrived later), reads the rest, and reports step 6's overflow once.
  const std::optional<std::string> rest = monitor.poll(step);
  BOOST_REQUIRE(rest.has_value());
  BOOST_TEST(*rest == "gradient overflow: 1 of the last " + std::to_string(step - 5) +
                          " steps skipped (first in layer4.weight); loss scale now 128");
  BOOST_TEST(!monitor.poll(step).has_value());  // nothing new since
}

// --max-consecutive-skips N: the poll due at step N is read when it arrives; its counters are
// those of step N, so the message is the CPU's, a step or more later.
BOOST_AUTO_TEST_CASE(max_consecutive_skips_stops_at_the_read_of_the_poll) {
  const Device device = Device::cuda(0);
  amp::LossScaler scaler(dynamic_config(1e30f), device);
  OverflowMonitor monitor(scaler, name_of, OverflowMonitor::kDefaultInterval, 8);
  int stopped_at = 0;
  std::string message;
  const RoundTrips before = round_trips();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int step = 1; stopped_at == 0 && std::chrono::steady_clock::now() < deadline; ++step) {
    if (step == 8) hold(device);  // the poll stays in flight for a while
    device_step(scaler, 2);
    try {
      monitor.after_step(step);
    } catch (const TrainingDiverged& error) {
      stopped_at = step;
      message = error.what();
      BOOST_TEST(error.streak() == 8);
      BOOST_TEST(error.step() == 8);  // the poll's step, not the step that read it
    }
  }
  BOOST_TEST(stopped_at > 8);
  BOOST_TEST(message.find("training diverged: the last 8 steps all overflowed "
                          "(max_consecutive_skips 8; loss scale now 3.90625e+27) (first in "
                          "layer2.weight)") == 0u,
             message);
  BOOST_TEST((round_trips() - before).host_waits == 0u);
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
