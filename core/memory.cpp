#include "core/memory.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/forever.h"
#include "core/round_trips.h"

// AddressSanitizer sees a cached block as live memory; poisoning it while it waits in the cache
// keeps use-after-free of large tensors detectable in sanitizer builds.
#if defined(__SANITIZE_ADDRESS__)
#define ALLOY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ALLOY_ASAN 1
#endif
#endif
#ifdef ALLOY_ASAN
#include <sanitizer/asan_interface.h>
#define ALLOY_POISON(pointer, size) ASAN_POISON_MEMORY_REGION(pointer, size)
#define ALLOY_UNPOISON(pointer, size) ASAN_UNPOISON_MEMORY_REGION(pointer, size)
#else
#define ALLOY_POISON(pointer, size) ((void)(pointer), (void)(size))
#define ALLOY_UNPOISON(pointer, size) ((void)(pointer), (void)(size))
#endif

namespace alloy {

const char* memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::master_parameters:
      return "master_parameters";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer_state:
      return "optimizer_state";
    case MemoryCategory::activations:
      return "activations";
    case MemoryCategory::workspace:
      return "workspace";
    case MemoryCategory::data:
      return "data";
    case MemoryCategory::communication:
      return "communication";
  }
  return "?";
}

void MemoryStats::on_allocate(MemoryCategory category, std::size_t bytes) {
  const auto index = static_cast<std::size_t>(category);
  const auto amount = static_cast<std::int64_t>(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  state_.current[index] += amount;
  if (state_.current[index] > state_.peak[index]) state_.peak[index] = state_.current[index];
  state_.total_current += amount;
  if (state_.total_current > state_.total_peak) state_.total_peak = state_.total_current;
}

void MemoryStats::on_free(MemoryCategory category, std::size_t bytes) {
  const auto index = static_cast<std::size_t>(category);
  const auto amount = static_cast<std::int64_t>(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  state_.current[index] -= amount;
  state_.total_current -= amount;
}

MemorySnapshot MemoryStats::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

void MemoryStats::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  state_.peak = state_.current;
  state_.total_peak = state_.total_current;
}

namespace {

constexpr std::size_t kAlignment = 64;  // vector kernels never straddle a cache line at a start
constexpr std::size_t kCachedFrom = std::size_t{64} << 10;
constexpr std::size_t kPage = 4096;

std::size_t host_block_size(std::size_t bytes) {
  const std::size_t rounding = bytes >= kCachedFrom ? kPage : kAlignment;
  return bytes == 0 ? kAlignment : (bytes + rounding - 1) / rounding * rounding;
}

// Host memory, 64-byte aligned. Blocks of 64 KiB and more are kept when freed and handed to
// the next request of the same size: a training step asks for the same sizes every time, and
// fresh large blocks come from mmap, whose page faults took a tenth of a LeNet step. Smaller
// blocks go back to malloc, which recycles them without faults.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes, MemoryCategory category) override {
    const std::size_t size = host_block_size(bytes);
    const bool cached = size >= kCachedFrom;
    void* pointer = cached ? take_cached(size) : nullptr;
    if (pointer == nullptr) {
      pointer = allocate_new(size);
      if (pointer == nullptr) {
        release_cached();  // cached blocks of other sizes may make room
        pointer = allocate_new(size);
      }
      if (pointer == nullptr) {
        fail("out of host memory: could not allocate ", bytes, " bytes for ",
             memory_category_name(category));
      }
      // The CPU's device allocation (core/round_trips.h): a block the cache manages but could
      // not serve. Small blocks come from malloc every time and are left out.
      if (cached) count_device_allocation();
    }
    stats().on_allocate(category, bytes);
    return pointer;
  }

  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) override {
    stats().on_free(category, bytes);
    const std::size_t size = host_block_size(bytes);
    if (size < kCachedFrom) {
      std::free(pointer);
      return;
    }
    ALLOY_POISON(pointer, size);
    std::lock_guard<std::mutex> lock(mutex_);
    free_blocks_[size].push_back(pointer);
    statistics_.cached_bytes += size;
  }

  Device device() const override { return Device::cpu(); }

  HostCacheStatistics statistics() {
    std::lock_guard<std::mutex> lock(mutex_);
    return statistics_;
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_blocks_) {
      for (void* block : blocks) {
        ALLOY_UNPOISON(block, size);
        std::free(block);
      }
    }
    free_blocks_.clear();
    statistics_.cached_bytes = 0;
  }

 private:
  void* take_cached(std::size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = free_blocks_.find(size);
    if (found == free_blocks_.end() || found->second.empty()) return nullptr;
    void* pointer = found->second.back();
    found->second.pop_back();
    statistics_.cached_bytes -= size;
    ++statistics_.reuses;
    ALLOY_UNPOISON(pointer, size);
    return pointer;
  }

  void* allocate_new(std::size_t size) {
    void* pointer = std::aligned_alloc(kAlignment, size);
    if (pointer != nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++statistics_.system_allocations;
    }
    return pointer;
  }

  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_blocks_;
  HostCacheStatistics statistics_;
};

CpuAllocator& cpu_allocator() {
  static Forever<CpuAllocator> allocator;
  return allocator.get();
}

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda_allocator(device.index);
}

MemoryStats& memory_stats(Device device) {
  return allocator_for(device).stats();
}

HostCacheStatistics host_cache_statistics() {
  return cpu_allocator().statistics();
}

void release_host_cache() {
  cpu_allocator().release_cached();
}

}  // namespace alloy
