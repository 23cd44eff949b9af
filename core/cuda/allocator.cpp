#include "core/cuda/allocator.h"

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/cuda/handles.h"
#include "core/forever.h"
#include "core/round_trips.h"

namespace alloy::cuda {

namespace {

constexpr std::size_t kSmallRounding = 512;
constexpr std::size_t kSmallLimit = std::size_t{1} << 20;
constexpr std::size_t kLargeRounding = std::size_t{2} << 20;
constexpr int kMaxDevices = 64;

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(std::size_t bytes, MemoryCategory category) override {
    const std::size_t size = cache_block_size(bytes);
    void* pointer = take_cached(size);
    if (pointer == nullptr) pointer = allocate_fresh(size, bytes, category);
    stats().on_allocate(category, bytes);
    return pointer;
  }

  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) override {
    if (pointer == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_lists_[cache_block_size(bytes)].push_back(pointer);
      cache_.cached_bytes += static_cast<std::int64_t>(cache_block_size(bytes));
    }
    stats().on_free(category, bytes);
  }

  Device device() const override { return Device::cuda(device_); }

  CacheStatistics statistics() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_;
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    const DeviceGuard guard(device_);  // cudaFree needs the block's device current
    for (auto& [size, blocks] : free_lists_) {
      while (!blocks.empty()) {
        // Off the list before the call: a failure leaves no block listed twice or freed twice.
        void* block = blocks.back();
        blocks.pop_back();
        cache_.cached_bytes -= static_cast<std::int64_t>(size);
        ALLOY_CUDA_CHECK(cudaFree(block), "releasing a cached block of ", size,
                         " bytes on cuda:", device_);
        ++cache_.free_calls;
        cache_.reserved_bytes -= static_cast<std::int64_t>(size);
      }
    }
  }

 private:
  void* take_cached(std::size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = free_lists_.find(size);
    if (found == free_lists_.end() || found->second.empty()) return nullptr;
    void* pointer = found->second.back();
    found->second.pop_back();
    cache_.cached_bytes -= static_cast<std::int64_t>(size);
    ++cache_.cache_hits;
    return pointer;
  }

  void* allocate_fresh(std::size_t size, std::size_t bytes, MemoryCategory category) {
    const DeviceGuard guard(device_);
    void* pointer = nullptr;
    cudaError_t status = cudaMalloc(&pointer, size);
    if (status == cudaErrorMemoryAllocation) {
      // Cached blocks of other sizes may be what stands in the way: give them back and retry
      // once, as PyTorch does before reporting out-of-memory.
      static_cast<void>(cudaGetLastError());  // clear the sticky-free error state
      release_cached();
      status = cudaMalloc(&pointer, size);
    }
    if (status != cudaSuccess) {
      const MemorySnapshot in_use = stats().snapshot();
      fail_call("cudaMalloc(&pointer, size)", status_text(status),
                detail::concat("allocating ", bytes, " bytes (block of ", size, ") for ",
                               memory_category_name(category), " on cuda:", device_, "; ",
                               in_use.total_current, " bytes in use by tensors"));
    }
    count_device_allocation();  // core/round_trips.h: one per cudaMalloc
    std::lock_guard<std::mutex> lock(mutex_);
    ++cache_.malloc_calls;
    cache_.reserved_bytes += static_cast<std::int64_t>(size);
    if (cache_.reserved_bytes > cache_.peak_reserved_bytes) {
      cache_.peak_reserved_bytes = cache_.reserved_bytes;
    }
    return pointer;
  }

  const int device_;
  std::mutex mutex_;
  // Exact rounded size -> free blocks of that size.
  std::map<std::size_t, std::vector<void*>> free_lists_;
  CacheStatistics cache_;
};

CachingAllocator& allocator_of(int device) {
  ALLOY_CHECK(device >= 0 && device < kMaxDevices, "cuda:", device, " is not a valid device");
  static Forever<std::array<std::unique_ptr<CachingAllocator>, kMaxDevices>> allocators;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = allocators.get()[static_cast<std::size_t>(device)];
  if (!slot) slot = std::make_unique<CachingAllocator>(device);
  return *slot;
}

}  // namespace

std::size_t cache_block_size(std::size_t bytes) {
  if (bytes == 0) return kSmallRounding;  // empty tensors still get a distinct address
  return bytes <= kSmallLimit ? round_up(bytes, kSmallRounding) : round_up(bytes, kLargeRounding);
}

CacheStatistics cache_statistics(int device) {
  return allocator_of(device).statistics();
}

void empty_cache(int device) {
  allocator_of(device).release_cached();
}

}  // namespace alloy::cuda

namespace alloy {

Allocator& cuda_allocator(int index) {
  std::string reason;
  if (!cuda_available(&reason)) {
    fail("cuda:", index, " requested, but no CUDA device is usable: ", reason);
  }
  const int count = cuda::usable_device_count();
  ALLOY_CHECK(index >= 0 && index < count, "cuda:", index, " requested, but this machine has ",
              count, " CUDA device", count == 1 ? "" : "s");
  return cuda::allocator_of(index);
}

}  // namespace alloy
