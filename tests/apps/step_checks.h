// Helpers shared by the training-step tests: how far one run's weight updates are from
// another's, a small synthetic data set, and a fixture that pins the CPU to one thread (results
// are bit-exact for a fixed thread count).
#pragma once

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <vector>

#include "core/data/synthetic.h"
#include "core/thread_pool.h"

namespace alloy::test {

// The largest difference between two runs' updates (after - before), relative to the largest
// update of `want`. Run: anything with the weights `before` and `after` a run, as host floats;
// both runs must start from the same weights.
template <class Run>
double update_difference(const Run& got, const Run& want) {
  BOOST_REQUIRE(got.before == want.before);
  BOOST_REQUIRE(got.after.size() == want.after.size());
  double largest = 0, worst = 0;
  for (std::size_t i = 0; i < want.after.size(); ++i) {
    const double want_update = static_cast<double>(want.after[i]) - want.before[i];
    const double got_update = static_cast<double>(got.after[i]) - got.before[i];
    largest = std::max(largest, std::abs(want_update));
    worst = std::max(worst, std::abs(got_update - want_update));
  }
  BOOST_REQUIRE(largest > 0);
  return worst / largest;
}

// 64 training and 16 test images of the synthetic set.
inline data::DatasetPair small_synthetic_data() {
  data::DatasetPair data;
  data.train = data::make_synthetic_dataset(64, 1, "synthetic/train");
  data.test = data::make_synthetic_dataset(16, 1, "synthetic/test");
  return data;
}

struct OneThread {
  OneThread() { set_cpu_threads(1); }
};

}  // namespace alloy::test
