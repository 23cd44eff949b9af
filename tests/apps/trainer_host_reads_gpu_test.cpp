// The CPU test's claim on a GPU: an O2 step on CUDA makes no device-to-host copy (every copy
// from a device into host memory counts in core/host_reads.h), so nothing in it waits for the
// device; the overflow monitor's periodic poll is the only read.
#include <boost/test/unit_test.hpp>

#include "apps/overflow_monitor.h"
#include "tests/apps/step_host_reads.h"
#include "tests/support/gpu.h"

using namespace alloy;

BOOST_AUTO_TEST_SUITE(trainer_host_reads_gpu)

BOOST_AUTO_TEST_CASE(an_o2_step_on_cuda_copies_nothing_to_the_host) {
  constexpr int kSteps = 60;
  const std::vector<std::uint64_t> reads =
      test::host_reads_per_step(Device::cuda(0), amp::OptLevel::O2, kSteps);
  BOOST_REQUIRE(reads.size() == static_cast<std::size_t>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    const std::int64_t step = i + 2;
    if (step % app::OverflowMonitor::kDefaultInterval == 0) continue;  // the scale poll
    BOOST_TEST(reads[i] == 0u, "step " << step);
  }
}

BOOST_AUTO_TEST_SUITE_END()
