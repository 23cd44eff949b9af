// Tensor::fill and Tensor::zeros (core/ops/fill.h): the values each dtype stores, and on the
// CPU no temporary host buffer: no operator new (a std::vector the size of the tensor was the
// old way), no allocator block, no host round trip.
#include "core/ops/fill.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "core/round_trips.h"
#include "tests/support/new_counter.h"

using namespace alloy;

namespace {

// Allocation figures that a fill must leave as they are.
struct Footprint {
  test::NewCounts news;
  HostCacheStatistics cache;
  MemorySnapshot memory;
  RoundTrips trips;

  static Footprint now() {
    return {test::thread_new_counts(), host_cache_statistics(),
            memory_stats(Device::cpu()).snapshot(), round_trips()};
  }
};

void check_nothing_allocated(const Footprint& before, const Footprint& after) {
  BOOST_TEST(after.news.calls == before.news.calls);
  BOOST_TEST(after.cache.system_allocations == before.cache.system_allocations);
  BOOST_TEST(after.cache.reuses == before.cache.reuses);
  BOOST_TEST(after.memory.total_peak == before.memory.total_peak);
  BOOST_TEST(after.memory.total_current == before.memory.total_current);
  BOOST_TEST((after.trips - before.trips) == RoundTrips{});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fill)

BOOST_AUTO_TEST_CASE(each_dtype_stores_the_value_as_copy_from_floats_would) {
  const float values[] = {0.0f, -0.0f, 1.0f, -2.5f, 3.14159f, 65504.0f, 1e30f, 7.0f};
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const float value : values) {
      Tensor filled = Tensor::empty({3, 5}, dtype);
      filled.fill(value);
      Tensor expected = Tensor::empty({3, 5}, dtype);
      expected.copy_from_floats(std::vector<float>(15, value));
      BOOST_TEST(std::memcmp(filled.raw(), expected.raw(), filled.nbytes()) == 0,
                 dtype_name(dtype) << " fill " << value);
    }
  }
  Tensor bytes = Tensor::empty({7}, DType::u8);
  bytes.fill(200.7f);
  for (const float v : bytes.to_floats())
    BOOST_TEST(v == 200.0f);
  Tensor ints = Tensor::empty({7}, DType::i32);
  ints.fill(-123456.9f);
  for (const float v : ints.to_floats())
    BOOST_TEST(v == -123456.0f);
  Tensor nan = Tensor::empty({2}, DType::f16);
  nan.fill(std::numeric_limits<float>::quiet_NaN());
  for (const float v : nan.to_floats())
    BOOST_TEST(std::isnan(v));
  BOOST_TEST(fill_pattern(1.0f, DType::f16) == float_to_half_bits(1.0f));
}

BOOST_AUTO_TEST_CASE(values_an_integer_dtype_cannot_hold_are_errors) {
  Tensor bytes = Tensor::empty({4}, DType::u8);
  BOOST_CHECK_THROW(bytes.fill(256.0f), Error);
  BOOST_CHECK_THROW(bytes.fill(-1.0f), Error);
  Tensor ints = Tensor::empty({4}, DType::i32);
  BOOST_CHECK_THROW(ints.fill(3e9f), Error);
  BOOST_CHECK_THROW(ints.fill(std::numeric_limits<float>::quiet_NaN()), Error);
}

BOOST_AUTO_TEST_CASE(fills_on_the_cpu_allocate_no_temporary) {
  // Large enough that any temporary of the tensor's size would be a cached host block.
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8}) {
    Tensor tensor = Tensor::empty({256, 1024}, dtype, Device::cpu(), MemoryCategory::gradients);
    const Footprint before = Footprint::now();
    tensor.fill(0.0f);
    tensor.fill(3.0f);
    const Footprint after = Footprint::now();
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      check_nothing_allocated(before, after);
    }
  }
}

BOOST_AUTO_TEST_CASE(zeros_allocates_the_tensor_and_nothing_else) {
  const MemorySnapshot memory = memory_stats(Device::cpu()).snapshot();
  const HostCacheStatistics cache = host_cache_statistics();
  const Tensor zeros = Tensor::zeros({512, 1024}, DType::f32);
  const MemorySnapshot after = memory_stats(Device::cpu()).snapshot();
  // One block taken for the tensor; the peak is the tensor itself, no temporary beside it.
  const HostCacheStatistics cache_after = host_cache_statistics();
  BOOST_TEST(cache_after.system_allocations + cache_after.reuses ==
             cache.system_allocations + cache.reuses + 1);
  BOOST_TEST(after.total_peak <=
             std::max(memory.total_peak,
                      memory.total_current + static_cast<std::int64_t>(zeros.nbytes())));
  const std::vector<float> values = zeros.to_floats();
  BOOST_TEST(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }));
}

BOOST_AUTO_TEST_CASE(a_temporary_would_be_seen) {
  // The counters see what the old fill did: a std::vector of the tensor's size.
  const Footprint before = Footprint::now();
  const std::vector<float> temporary(1024, 1.0f);
  const Footprint after = Footprint::now();
  BOOST_TEST(after.news.calls == before.news.calls + 1);
  BOOST_TEST(after.news.bytes >= before.news.bytes + temporary.size() * sizeof(float));
}

BOOST_AUTO_TEST_SUITE_END()
