#include "core/memory.h"

#include <boost/test/unit_test.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"

using namespace alloy;

namespace {

constexpr MemoryCategory kParams = MemoryCategory::parameters;
constexpr MemoryCategory kActs = MemoryCategory::activations;

}  // namespace

BOOST_AUTO_TEST_SUITE(memory)

BOOST_AUTO_TEST_CASE(current_and_peak_per_category_and_in_total) {
  MemoryStats stats;
  stats.on_allocate(kParams, 100);
  stats.on_allocate(kActs, 50);
  stats.on_free(kActs, 50);
  stats.on_allocate(kActs, 30);
  MemorySnapshot s = stats.snapshot();
  BOOST_TEST(s.current_of(kParams) == 100);
  BOOST_TEST(s.peak_of(kParams) == 100);
  BOOST_TEST(s.current_of(kActs) == 30);
  BOOST_TEST(s.peak_of(kActs) == 50);
  BOOST_TEST(s.total_current == 130);
  BOOST_TEST(s.total_peak == 150);
  BOOST_TEST(s.current_of(MemoryCategory::workspace) == 0);

  // The total's peak is the peak of the sum, not the sum of the peaks: parameters peak at 100
  // and activations at 60, but never together.
  stats.on_free(kParams, 100);
  stats.on_allocate(kActs, 30);
  s = stats.snapshot();
  BOOST_TEST(s.peak_of(kActs) == 60);
  BOOST_TEST(s.total_current == 60);
  BOOST_TEST(s.total_peak == 150);
}

BOOST_AUTO_TEST_CASE(reset_peaks_restarts_from_the_current_figures) {
  MemoryStats stats;
  stats.on_allocate(kParams, 100);
  stats.on_allocate(kActs, 400);
  stats.on_free(kActs, 300);
  stats.reset_peaks();
  MemorySnapshot s = stats.snapshot();
  BOOST_TEST(s.peak_of(kActs) == 100);
  BOOST_TEST(s.peak_of(kParams) == 100);
  BOOST_TEST(s.total_peak == 200);
  stats.on_allocate(kActs, 10);
  s = stats.snapshot();
  BOOST_TEST(s.peak_of(kActs) == 110);
  BOOST_TEST(s.total_peak == 210);
}

BOOST_AUTO_TEST_CASE(counters_are_thread_safe) {
  MemoryStats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&stats] {
      for (int i = 0; i < 10000; ++i) {
        stats.on_allocate(MemoryCategory::workspace, 8);
        stats.on_free(MemoryCategory::workspace, 8);
      }
      stats.on_allocate(MemoryCategory::workspace, 1);
    });
  }
  for (auto& thread : threads)
    thread.join();
  const MemorySnapshot s = stats.snapshot();
  BOOST_TEST(s.current_of(MemoryCategory::workspace) == 4);
  BOOST_TEST(s.total_current == 4);
  BOOST_TEST(s.peak_of(MemoryCategory::workspace) <= 4 * 8 + 4);
}

BOOST_AUTO_TEST_CASE(the_cpu_allocator_accounts_tensors) {
  MemoryStats& stats = memory_stats(Device::cpu());
  const MemorySnapshot before = stats.snapshot();
  stats.reset_peaks();
  {
    const Tensor a =
        Tensor::empty({1000}, DType::f32, Device::cpu(), MemoryCategory::optimizer_state);
    const Tensor b = Tensor::empty({3}, DType::u8, Device::cpu(), MemoryCategory::data);
    // Alignment is 64 bytes, yet the accounting counts the bytes asked for.
    const MemorySnapshot during = stats.snapshot();
    BOOST_TEST(during.current_of(MemoryCategory::optimizer_state) -
                   before.current_of(MemoryCategory::optimizer_state) ==
               4000);
    BOOST_TEST(during.current_of(MemoryCategory::data) - before.current_of(MemoryCategory::data) ==
               3);
    BOOST_TEST(during.total_current - before.total_current == 4003);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(a.raw()) % 64 == 0u);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(b.raw()) % 64 == 0u);
  }
  const MemorySnapshot after = stats.snapshot();
  BOOST_TEST(after.total_current == before.total_current);
  BOOST_TEST(after.peak_of(MemoryCategory::optimizer_state) -
                 before.current_of(MemoryCategory::optimizer_state) ==
             4000);
  BOOST_TEST(after.total_peak - before.total_current == 4003);
  BOOST_TEST(&allocator_for(Device::cpu()).stats() == &stats);
  BOOST_TEST((allocator_for(Device::cpu()).device() == Device::cpu()));
}

BOOST_AUTO_TEST_CASE(large_host_blocks_are_reused_by_size_and_small_ones_are_not) {
  release_host_cache();
  const HostCacheStatistics start = host_cache_statistics();
  BOOST_TEST(start.cached_bytes == 0u);
  const void* first = nullptr;
  {
    const Tensor large = Tensor::empty({100000}, DType::f32, Device::cpu(),
                                       MemoryCategory::activations);  // 400,000 bytes
    first = large.raw();
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(first) % 64 == 0u);
  }
  const HostCacheStatistics freed = host_cache_statistics();
  BOOST_TEST(freed.system_allocations == start.system_allocations + 1);
  BOOST_TEST(freed.cached_bytes == 401408u);  // rounded up to whole 4 KiB pages
  {
    // The same size, as the next training step asks for: the same block, no new memory.
    const Tensor again =
        Tensor::empty({100000}, DType::f32, Device::cpu(), MemoryCategory::gradients);
    BOOST_TEST(again.raw() == first);
    const HostCacheStatistics reused = host_cache_statistics();
    BOOST_TEST(reused.system_allocations == freed.system_allocations);
    BOOST_TEST(reused.reuses == freed.reuses + 1);
    BOOST_TEST(reused.cached_bytes == 0u);
    // The accounting counts what tensors hold, not what the cache keeps.
    BOOST_TEST(memory_stats(Device::cpu())
                   .snapshot()
                   .current[static_cast<int>(MemoryCategory::gradients)] >= 400000);
  }
  {
    const Tensor small = Tensor::empty({1000}, DType::f32, Device::cpu(), MemoryCategory::data);
    (void)small;
  }
  BOOST_TEST(host_cache_statistics().cached_bytes == 401408u);  // the small block went back
  release_host_cache();
  BOOST_TEST(host_cache_statistics().cached_bytes == 0u);
}

BOOST_AUTO_TEST_CASE(category_names) {
  BOOST_TEST(std::string(memory_category_name(MemoryCategory::master_parameters)) ==
             "master_parameters");
  BOOST_TEST(std::string(memory_category_name(MemoryCategory::communication)) == "communication");
  BOOST_TEST(static_cast<std::size_t>(MemoryCategory::communication) + 1 == kMemoryCategoryCount);
}

BOOST_AUTO_TEST_SUITE_END()
