// The watchdog that bounds collectives nobody waits for (parallel/watchdog.h), with polls that
// stand in for CUDA events: finished work is dropped, work that outlives the timeout fails once
// with its description, and a health failure or a failing poll ends tracking at once.
#include "parallel/watchdog.h"

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <thread>

#include "core/error.h"

using namespace alloy;
using namespace alloy::parallel;
using namespace std::chrono_literals;

namespace {

struct Failures {
  std::mutex mutex;
  std::vector<std::pair<std::string, std::string>> seen;  // (what, cause)
  std::size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return seen.size();
  }
};

Watchdog::Hooks hooks_into(Failures& failures, std::function<std::string()> health = nullptr) {
  Watchdog::Hooks hooks;
  hooks.health = std::move(health);
  hooks.on_failure = [&failures](const std::string& what, const std::string& cause) {
    std::lock_guard<std::mutex> lock(failures.mutex);
    failures.seen.emplace_back(what, cause);
  };
  return hooks;
}

// Polls `condition` every millisecond for up to `limit`.
bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return condition();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(watchdog)

BOOST_AUTO_TEST_CASE(finished_work_is_dropped_without_a_failure) {
  Failures failures;
  std::atomic<bool> finished{false};
  {
    Watchdog watchdog(200ms, hooks_into(failures), 1ms);
    watchdog.track("allreduce_sum of f32[4]", [&] { return finished.load(); });
    BOOST_TEST(watchdog.pending() == 1u);
    finished = true;
    BOOST_TEST(eventually([&] { return watchdog.pending() == 0; }, 2000ms));
    std::this_thread::sleep_for(300ms);  // past the timeout: nothing left to fail
    BOOST_TEST(!watchdog.failed());
  }
  BOOST_TEST(failures.count() == 0u);
}

BOOST_AUTO_TEST_CASE(work_that_outlives_the_timeout_fails_once_naming_it) {
  Failures failures;
  Watchdog watchdog(100ms, hooks_into(failures), 1ms);
  const auto start = std::chrono::steady_clock::now();
  watchdog.track("allreduce_half_sum of f16[1024] on rank 1 of 2", [] { return false; });
  watchdog.track("broadcast of f32[3] from rank 0", [] { return false; });
  BOOST_TEST_REQUIRE(eventually([&] { return failures.count() > 0; }, 5000ms));
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
  BOOST_TEST(elapsed >= 100);
  BOOST_TEST(elapsed < 3000);
  std::this_thread::sleep_for(50ms);
  BOOST_TEST_REQUIRE(failures.count() == 1u);  // once, for the oldest
  BOOST_TEST(failures.seen[0].first == "allreduce_half_sum of f16[1024] on rank 1 of 2");
  BOOST_TEST(failures.seen[0].second.find("timed out after") != std::string::npos);
  BOOST_TEST(watchdog.failed());
  BOOST_TEST(watchdog.pending() == 0u);
  watchdog.track("later work", [] { return false; });  // ignored after the failure
  BOOST_TEST(watchdog.pending() == 0u);
}

BOOST_AUTO_TEST_CASE(a_health_failure_ends_tracking_before_the_timeout) {
  Failures failures;
  std::atomic<bool> peer_gone{false};
  Watchdog watchdog(60s,
                    hooks_into(failures,
                               [&]() -> std::string {
                                 return peer_gone ? "remote process exited or there was a "
                                                    "network error (ncclRemoteError)"
                                                  : "";
                               }),
                    1ms);
  watchdog.track("allreduce_average of f32[8]", [] { return false; });
  std::this_thread::sleep_for(20ms);
  BOOST_TEST(failures.count() == 0u);  // healthy and within the timeout: still waiting
  peer_gone = true;
  BOOST_TEST_REQUIRE(eventually([&] { return failures.count() == 1; }, 2000ms));
  BOOST_TEST(failures.seen[0].first == "allreduce_average of f32[8]");
  BOOST_TEST(failures.seen[0].second.find("ncclRemoteError") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_poll_that_throws_is_the_failure) {
  Failures failures;
  Watchdog watchdog(60s, hooks_into(failures), 1ms);
  watchdog.track("allreduce_sum of f32[2]",
                 []() -> bool { fail("cudaEventQuery(event) failed: an illegal memory access"); });
  BOOST_TEST_REQUIRE(eventually([&] { return failures.count() == 1; }, 2000ms));
  BOOST_TEST(failures.seen[0].second.find("illegal memory access") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
