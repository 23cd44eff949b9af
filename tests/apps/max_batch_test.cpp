// The search of `alloy mem --max-batch` (apps/train/max_batch.h) against predicates whose answer is
// known: a memory that fits every batch up to a threshold. The device-driven search runs in
// tests/apps/max_batch_gpu_test.cpp.
#include "apps/train/max_batch.h"

#include <boost/test/unit_test.hpp>
#include <set>

#include "core/error.h"

using namespace alloy;
using namespace alloy::app;

namespace {

// Fits every batch up to `threshold`; records each batch it is asked about.
struct Threshold {
  std::int64_t threshold;
  std::multiset<std::int64_t> asked;
  bool operator()(std::int64_t batch) {
    asked.insert(batch);
    return batch <= threshold;
  }
};

MaxBatch search(Threshold& memory, std::int64_t start, std::int64_t limit, double tolerance) {
  return search_max_batch(start, limit, tolerance, [&](std::int64_t b) { return memory(b); });
}

void check_no_batch_asked_twice(const Threshold& memory) {
  for (std::int64_t batch : memory.asked)
    BOOST_TEST(memory.asked.count(batch) == 1u, "batch " << batch << " asked twice");
}

}  // namespace

BOOST_AUTO_TEST_CASE(exact_search_finds_the_threshold_from_below_and_above) {
  for (std::int64_t threshold : {1, 2, 3, 7, 64, 100, 1000, 4095, 4096, 4097, 9999}) {
    for (std::int64_t start : {1, 5, 128, 5000}) {
      Threshold memory{threshold, {}};
      const MaxBatch m = search(memory, start, 1 << 20, 0.0);
      BOOST_TEST(m.largest_fitting == threshold, "threshold " << threshold << " start " << start);
      BOOST_TEST(m.smallest_failing == threshold + 1);
      BOOST_TEST(!m.reached_limit());
      BOOST_TEST(m.limit == 1 << 20);
      BOOST_TEST(m.probes == static_cast<int>(memory.asked.size()));
      check_no_batch_asked_twice(memory);
    }
  }
}

BOOST_AUTO_TEST_CASE(tolerance_stops_the_bisection_early) {
  Threshold memory{10000, {}};
  const MaxBatch m = search(memory, 128, 1 << 20, 1.0 / 32);
  BOOST_TEST(m.largest_fitting <= 10000);
  BOOST_TEST(m.smallest_failing > 10000);
  BOOST_TEST(m.smallest_failing - m.largest_fitting <= m.largest_fitting / 32);
  Threshold exact{10000, {}};
  const MaxBatch e = search(exact, 128, 1 << 20, 0.0);
  BOOST_TEST(m.probes < e.probes);  // the point of a tolerance: fewer (expensive) probes
}

BOOST_AUTO_TEST_CASE(everything_fits_up_to_the_limit) {
  Threshold memory{1 << 30, {}};
  const MaxBatch m = search(memory, 100, 1000, 0.0);
  BOOST_TEST(m.largest_fitting == 1000);
  BOOST_TEST(m.reached_limit());
  BOOST_TEST(*memory.asked.rbegin() == 1000);  // never past the limit
  const std::set<std::int64_t> expected = {100, 200, 400, 800, 1000};
  BOOST_TEST((std::set<std::int64_t>(memory.asked.begin(), memory.asked.end()) == expected));
}

BOOST_AUTO_TEST_CASE(nothing_fits) {
  Threshold memory{0, {}};
  const MaxBatch m = search(memory, 64, 1000, 0.0);
  BOOST_TEST(m.largest_fitting == 0);
  BOOST_TEST(m.smallest_failing == 1);
  BOOST_TEST(!m.reached_limit());
}

BOOST_AUTO_TEST_CASE(start_above_the_limit_is_clamped) {
  Threshold memory{50, {}};
  const MaxBatch m = search(memory, 5000, 40, 0.0);
  BOOST_TEST(m.largest_fitting == 40);
  BOOST_TEST(m.reached_limit());
  BOOST_TEST(memory.asked.size() == 1u);
}

BOOST_AUTO_TEST_CASE(bad_arguments_fail) {
  Threshold memory{10, {}};
  BOOST_CHECK_THROW(search(memory, 1, 0, 0.0), Error);
  BOOST_CHECK_THROW(search(memory, 1, 10, -1.0), Error);
}
