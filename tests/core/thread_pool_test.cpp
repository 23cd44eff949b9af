#include "core/thread_pool.h"

#include <atomic>
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"

using namespace alloy;

namespace {

struct Slice {
  std::int64_t begin, end;
  int chunk;
  std::thread::id thread;
};

// The slices a pool hands out for `count`, by chunk.
std::vector<Slice> slices_of(ThreadPool& pool, std::int64_t count) {
  std::vector<Slice> slices(static_cast<std::size_t>(pool.size()), Slice{-1, -1, -1, {}});
  pool.parallel_for(count, [&](std::int64_t begin, std::int64_t end, int chunk) {
    slices[static_cast<std::size_t>(chunk)] = {begin, end, chunk, std::this_thread::get_id()};
  });
  return slices;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(thread_pool)

BOOST_AUTO_TEST_CASE(chunk_ranges_tile_the_range_in_order) {
  for (const std::int64_t count : {0, 1, 5, 7, 64, 1001}) {
    for (const int chunks : {1, 2, 3, 8}) {
      std::int64_t expected_begin = 0;
      for (int index = 0; index < chunks; ++index) {
        std::int64_t begin, end;
        chunk_range(count, chunks, index, begin, end);
        BOOST_TEST(begin == expected_begin);
        // Sizes differ by at most one, larger ones first.
        BOOST_TEST(end - begin == count / chunks + (index < count % chunks ? 1 : 0));
        expected_begin = end;
      }
      BOOST_TEST(expected_begin == count);
    }
  }
}

BOOST_AUTO_TEST_CASE(every_index_is_visited_once) {
  ThreadPool pool(3);
  BOOST_TEST(pool.size() == 3);
  for (const std::int64_t count : {0, 1, 2, 3, 10, 100000}) {
    std::vector<std::atomic<int>> visits(static_cast<std::size_t>(count));
    pool.parallel_for(count, [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t i = begin; i < end; ++i)
        ++visits[static_cast<std::size_t>(i)];
    });
    for (std::int64_t i = 0; i < count; ++i) {
      BOOST_TEST(visits[static_cast<std::size_t>(i)].load() == 1, "index " << i << " of " << count);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_split_is_the_same_every_time) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  const std::vector<Slice> first = slices_of(pool, 1003);
  for (int run = 0; run < 50; ++run) {
    const std::vector<Slice> again = slices_of(pool, 1003);
    for (std::size_t chunk = 0; chunk < first.size(); ++chunk) {
      BOOST_TEST(again[chunk].begin == first[chunk].begin);
      BOOST_TEST(again[chunk].end == first[chunk].end);
      // Chunk k always runs on the same thread: chunk 0 on the caller.
      BOOST_TEST((again[chunk].thread == first[chunk].thread));
    }
  }
  BOOST_TEST((first[0].thread == caller));
  for (std::size_t chunk = 0; chunk < first.size(); ++chunk) {
    std::int64_t begin, end;
    chunk_range(1003, 4, static_cast<int>(chunk), begin, end);
    BOOST_TEST(first[chunk].begin == begin);
    BOOST_TEST(first[chunk].end == end);
  }
}

BOOST_AUTO_TEST_CASE(per_chunk_partial_sums_are_bitwise_reproducible) {
  // What kernels rely on: float partials per chunk, combined in chunk order, give the same
  // bits on every run for a fixed thread count.
  ThreadPool pool(3);
  std::vector<float> values(30001);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = 1.0f / static_cast<float>(i + 1);
  const auto sum = [&] {
    std::vector<float> partial(3, 0.0f);
    pool.parallel_for(static_cast<std::int64_t>(values.size()), [&](std::int64_t begin,
                                                                    std::int64_t end, int chunk) {
      for (std::int64_t i = begin; i < end; ++i)
        partial[static_cast<std::size_t>(chunk)] += values[static_cast<std::size_t>(i)];
    });
    return std::accumulate(partial.begin(), partial.end(), 0.0f);
  };
  const float first = sum();
  for (int run = 0; run < 20; ++run)
    BOOST_TEST(sum() == first);
}

BOOST_AUTO_TEST_CASE(exceptions_reach_the_caller_and_the_pool_survives) {
  ThreadPool pool(3);
  for (const int failing : {0, 2}) {
    BOOST_CHECK_THROW(pool.parallel_for(30,
                                        [&](std::int64_t, std::int64_t, int chunk) {
                                          if (chunk == failing) throw std::runtime_error("boom");
                                        }),
                      std::runtime_error);
  }
  std::atomic<std::int64_t> total{0};
  pool.parallel_for(30, [&](std::int64_t begin, std::int64_t end, int) { total += end - begin; });
  BOOST_TEST(total.load() == 30);
}

BOOST_AUTO_TEST_CASE(one_thread_runs_inline) {
  ThreadPool pool(1);
  const std::vector<Slice> slices = slices_of(pool, 10);
  BOOST_TEST(slices[0].begin == 0);
  BOOST_TEST(slices[0].end == 10);
  BOOST_TEST((slices[0].thread == std::this_thread::get_id()));
  BOOST_CHECK_THROW(ThreadPool(0), Error);
}

BOOST_AUTO_TEST_CASE(the_process_pool_resizes) {
  set_cpu_threads(3);
  BOOST_TEST(cpu_threads() == 3);
  BOOST_TEST(cpu_pool().size() == 3);
  set_cpu_threads(1);
  BOOST_TEST(cpu_threads() == 1);
  BOOST_CHECK_THROW(set_cpu_threads(0), Error);
  BOOST_TEST(cpu_threads() == 1);
}

BOOST_AUTO_TEST_SUITE_END()
