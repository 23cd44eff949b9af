// The loader's worker pool: every index of a job run once, jobs one after the other on the same
// threads, the lowest failing index's error rethrown whatever the timing, and the shared pool
// kept between callers.
#include "core/data/worker_pool.h"

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"

using namespace alloy;
using namespace alloy::data;

BOOST_AUTO_TEST_SUITE(worker_pool)

BOOST_AUTO_TEST_CASE(every_index_once_on_the_pools_own_threads) {
  WorkerPool pool(3);
  BOOST_TEST(pool.threads() == 3);
  std::set<std::thread::id> seen;
  std::mutex mutex;
  for (int job = 0; job < 20; ++job) {
    std::vector<std::atomic<int>> calls(97);
    pool.run(97, [&](std::int64_t i) {
      calls[static_cast<std::size_t>(i)]++;
      std::lock_guard<std::mutex> lock(mutex);
      seen.insert(std::this_thread::get_id());
    });
    int wrong = 0;
    for (const auto& c : calls)
      wrong += c.load() != 1;
    BOOST_TEST(wrong == 0);
  }
  // Twenty jobs ran on at most the pool's three threads, none of them this one.
  BOOST_TEST(seen.size() <= 3u);
  BOOST_TEST(seen.count(std::this_thread::get_id()) == 0u);
  pool.run(0, [](std::int64_t) { BOOST_ERROR("a call for an empty job"); });
}

BOOST_AUTO_TEST_CASE(the_lowest_failing_index_is_rethrown) {
  WorkerPool pool(4);
  for (int attempt = 0; attempt < 10; ++attempt) {
    std::atomic<int> done{0};
    try {
      pool.run(64, [&](std::int64_t i) {
        done++;
        if (i == 50 || i == 7 || i == 33) fail("index ", i);
      });
      BOOST_ERROR("no failure surfaced");
    } catch (const Error& error) {
      BOOST_TEST(std::string(error.what()) == "index 7");
    }
    BOOST_TEST(done.load() == 64);  // the other indices still ran
  }
  std::atomic<int> after{0};
  pool.run(5, [&](std::int64_t) { after++; });
  BOOST_TEST(after.load() == 5);  // a failed job leaves the pool usable
}

BOOST_AUTO_TEST_CASE(the_shared_pool_is_kept_for_the_same_count) {
  const auto first = shared_worker_pool(2);
  const WorkerPool* address = first.get();
  BOOST_TEST(shared_worker_pool(2).get() == address);
  BOOST_TEST(shared_worker_pool(3)->threads() == 3);
  BOOST_TEST(first->threads() == 2);  // a holder keeps its pool
}

BOOST_AUTO_TEST_SUITE_END()
