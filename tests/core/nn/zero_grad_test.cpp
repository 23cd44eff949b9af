// zero_grad, called by every training step, allocates nothing once the gradients exist: no
// operator new (no temporary host buffer, not even a list of the parameters), no allocator
// block, no host round trip; and the gradients are zero.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <vector>

#include "core/models/models.h"
#include "core/random.h"
#include "core/round_trips.h"
#include "tests/support/new_counter.h"

using namespace alloy;

BOOST_AUTO_TEST_SUITE(zero_grad)

BOOST_AUTO_TEST_CASE(zero_grad_allocates_nothing_once_gradients_exist) {
  for (const char* name : {"lenet", "resnet18"}) {
    BOOST_TEST_CONTEXT(name) {
      Generator generator(5);
      auto model = models::make_model(name, generator, 10);
      model->zero_grad();  // allocates the gradients
      for (nn::Parameter* parameter : model->parameters())
        parameter->grad.fill(1.5f);

      const test::NewCounts news = test::thread_new_counts();
      const HostCacheStatistics cache = host_cache_statistics();
      const MemorySnapshot memory = memory_stats(Device::cpu()).snapshot();
      const RoundTrips trips = round_trips();
      model->zero_grad();
      const test::NewCounts news_after = test::thread_new_counts();
      const HostCacheStatistics cache_after = host_cache_statistics();
      const MemorySnapshot memory_after = memory_stats(Device::cpu()).snapshot();
      BOOST_TEST(news_after.calls == news.calls);
      BOOST_TEST(cache_after.system_allocations == cache.system_allocations);
      BOOST_TEST(cache_after.reuses == cache.reuses);
      BOOST_TEST(memory_after.total_peak == memory.total_peak);
      BOOST_TEST((round_trips() - trips) == RoundTrips{});

      for (nn::Parameter* parameter : model->parameters()) {
        const std::vector<float> values = parameter->grad.to_floats();
        BOOST_TEST(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }),
                   parameter->name);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
