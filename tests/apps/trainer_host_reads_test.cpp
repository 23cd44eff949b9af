// A training step hands nothing back to the host: the loss and accuracy stay in a device tally,
// the loss scale and the overflow flag on the device. The only reads are the overflow
// monitor's, once every OverflowMonitor::kDefaultInterval steps, and only with a dynamic scale.
#include <boost/test/unit_test.hpp>

#include "apps/overflow_monitor.h"
#include "tests/apps/step_host_reads.h"

using namespace alloy;

BOOST_AUTO_TEST_SUITE(trainer_host_reads)

BOOST_AUTO_TEST_CASE(steps_read_nothing_back_but_the_periodic_scale_poll) {
  constexpr int kSteps = 60;
  const std::int64_t interval = app::OverflowMonitor::kDefaultInterval;
  for (const amp::OptLevel level :
       {amp::OptLevel::O0, amp::OptLevel::O1, amp::OptLevel::O2, amp::OptLevel::O3}) {
    const amp::AmpProperties properties = amp::resolve_properties(level, {});
    BOOST_TEST_CONTEXT(amp::opt_level_name(level)) {
      const std::vector<std::uint64_t> reads =
          test::host_reads_per_step(Device::cpu(), level, kSteps);
      BOOST_REQUIRE(reads.size() == static_cast<std::size_t>(kSteps));
      int polls = 0;
      for (int i = 0; i < kSteps; ++i) {
        const std::int64_t step = i + 2;  // reads[0] is the second step
        const bool poll = properties.loss_scale.dynamic && step % interval == 0;
        BOOST_TEST_CONTEXT("step " << step) {
          if (poll) {
            BOOST_TEST(reads[i] > 0u);
            ++polls;
          } else {
            BOOST_TEST(reads[i] == 0u);
          }
        }
      }
      BOOST_TEST(polls == (properties.loss_scale.dynamic ? 2 : 0));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
