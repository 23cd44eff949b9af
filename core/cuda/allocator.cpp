#include "core/cuda/allocator.h"

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
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

// Lets this thread make calls a non-relaxed stream capture refuses, for the guard's lifetime.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() {
    ALLOY_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_),
                     "relaxing this thread's stream-capture mode for a graph pool's cudaMalloc");
  }
  ~RelaxedCaptureMode() { static_cast<void>(cudaThreadExchangeStreamCaptureMode(&mode_)); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // the previous mode once swapped
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(std::size_t bytes, MemoryCategory category) override {
    const std::size_t size = cache_block_size(bytes);
    void* pointer = routing_ != 0 ? allocate_in_pool(size, bytes, category) : take_cached(size);
    if (pointer == nullptr) pointer = allocate_fresh(size, bytes, category, routing_ == 0);
    stats().on_allocate(category, bytes);
    return pointer;
  }

  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) override {
    if (pointer == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!return_to_pool(pointer, bytes, category)) {
        free_lists_[cache_block_size(bytes)].push_back(pointer);
        cache_.cached_bytes += static_cast<std::int64_t>(cache_block_size(bytes));
      }
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

  // Graph pools (GraphPool in allocator.h).
  std::uint64_t create_pool() {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::uint64_t id = next_pool_id_++;
    pools_[id];
    return id;
  }

  void destroy_pool(std::uint64_t id) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (routing_ == id) routing_ = 0;
    const auto found = pools_.find(id);
    if (found == pools_.end()) return;
    // The graph is gone: nothing replays into the free blocks any more.
    for (auto& [size, blocks] : found->second.free_lists) {
      for (void* block : blocks) {
        pool_blocks_.erase(block);
        free_lists_[size].push_back(block);
        cache_.cached_bytes += static_cast<std::int64_t>(size);
      }
    }
    pools_.erase(found);
  }

  void begin_routing(std::uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    ALLOY_CHECK(routing_ == 0, "cuda:", device_, ": graph pool ", routing_.load(),
                " already receives this device's allocations; one capture at a time");
    ALLOY_CHECK(pools_.count(id) != 0, "cuda:", device_, ": graph pool ", id, " does not exist");
    routing_ = id;
  }

  void end_routing(std::uint64_t id) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (routing_ == id) routing_ = 0;
  }

  PoolStatistics pool_statistics(std::uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = pools_.find(id);
    ALLOY_CHECK(found != pools_.end(), "cuda:", device_, ": graph pool ", id, " does not exist");
    return found->second.statistics;
  }

 private:
  struct Pool {
    std::map<std::size_t, std::vector<void*>> free_lists;
    PoolStatistics statistics;

    void note_use(std::size_t bytes, MemoryCategory category) {
      statistics.in_use[static_cast<std::size_t>(category)] += static_cast<std::int64_t>(bytes);
      statistics.in_use_bytes += static_cast<std::int64_t>(bytes);
      if (statistics.in_use_bytes > statistics.peak_in_use_bytes) {
        statistics.peak_in_use_bytes = statistics.in_use_bytes;
        statistics.in_use_at_peak = statistics.in_use;
      }
    }
    void note_free(std::size_t bytes, MemoryCategory category) {
      statistics.in_use[static_cast<std::size_t>(category)] -= static_cast<std::int64_t>(bytes);
      statistics.in_use_bytes -= static_cast<std::int64_t>(bytes);
    }
  };

  static void* pop(std::map<std::size_t, std::vector<void*>>& free_lists, std::size_t size) {
    const auto found = free_lists.find(size);
    if (found == free_lists.end() || found->second.empty()) return nullptr;
    void* pointer = found->second.back();
    found->second.pop_back();
    return pointer;
  }

  // Under mutex_: the block becomes the routing pool's.
  Pool& adopt(void* pointer, std::size_t size) {
    Pool& pool = pools_.at(routing_);
    pool_blocks_[pointer] = routing_;
    ++pool.statistics.blocks;
    pool.statistics.reserved_bytes += static_cast<std::int64_t>(size);
    return pool;
  }

  void* allocate_in_pool(std::size_t size, std::size_t bytes, MemoryCategory category) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Pool& pool = pools_.at(routing_);
      void* pointer = pop(pool.free_lists, size);
      if (pointer != nullptr) {
        pool.note_use(bytes, category);
        return pointer;
      }
      // A cached block's last use was issued before the capture began, so every replay runs
      // after it: the pool may take the block over.
      pointer = pop(free_lists_, size);
      if (pointer != nullptr) {
        cache_.cached_bytes -= static_cast<std::int64_t>(size);
        ++cache_.cache_hits;
        adopt(pointer, size).note_use(bytes, category);
        return pointer;
      }
    }
    void* pointer = nullptr;
    {
      // A capture that is not relaxed refuses cudaMalloc on this thread: the call is not
      // captured, so a graph that needed it redone at each replay would be wrong. This one
      // needs no redoing: the pool keeps the block for the graph's lifetime (PyTorch's
      // allocator does the same).
      const RelaxedCaptureMode relaxed;
      pointer = allocate_fresh(size, bytes, category, /*may_release_cache=*/false);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    adopt(pointer, size).note_use(bytes, category);
    return pointer;
  }

  // Under mutex_: whether a freed block went to a pool (its own, or the routing one).
  bool return_to_pool(void* pointer, std::size_t bytes, MemoryCategory category) {
    const std::size_t size = cache_block_size(bytes);
    const auto owner = pool_blocks_.find(pointer);
    if (owner != pool_blocks_.end()) {
      const auto pool = pools_.find(owner->second);
      if (pool != pools_.end()) {
        pool->second.note_free(bytes, category);
        pool->second.free_lists[size].push_back(pointer);
        return true;
      }
      pool_blocks_.erase(owner);  // its pool went with its graph: the block is no pool's now
    }
    if (routing_ == 0) return false;
    // Allocated before the capture and freed during it: the graph may still read it at each
    // replay, so it must not serve other work.
    adopt(pointer, size).free_lists[size].push_back(pointer);
    return true;
  }

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

  // `may_release_cache`: on out-of-memory, give the cached blocks back and retry. Not while a
  // pool routes (a graph capture): cudaFree during a capture invalidates it (PyTorch's
  // allocator skips its release there too), and the capture's out-of-memory is reported as is.
  void* allocate_fresh(std::size_t size, std::size_t bytes, MemoryCategory category,
                       bool may_release_cache) {
    const DeviceGuard guard(device_);
    void* pointer = nullptr;
    cudaError_t status = cudaMalloc(&pointer, size);
    if (status == cudaErrorMemoryAllocation) {
      static_cast<void>(cudaGetLastError());  // clear the non-sticky error state
      if (may_release_cache) {
        // Cached blocks of other sizes may be what stands in the way: give them back and retry
        // once, as PyTorch does before reporting out-of-memory.
        release_cached();
        status = cudaMalloc(&pointer, size);
      }
    }
    if (status != cudaSuccess) {
      const MemorySnapshot in_use = stats().snapshot();
      const std::string message =
          call_failure("cudaMalloc(&pointer, size)", status_text(status),
                       detail::concat("allocating ", bytes, " bytes (block of ", size, ") for ",
                                      memory_category_name(category), " on cuda:", device_, "; ",
                                      in_use.total_current, " bytes in use by tensors",
                                      may_release_cache ? ""
                                                        : "; the cache was not emptied, since a "
                                                          "CUDA-graph capture is under way"));
      if (status == cudaErrorMemoryAllocation) {
        static_cast<void>(cudaGetLastError());  // leave no error for the next launch check
        throw OutOfMemory(message);
      }
      throw Error(message);
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
  std::map<std::uint64_t, Pool> pools_;
  // Every block a pool owns, free or in use -> its pool's id. Blocks in use whose pool was
  // destroyed stay listed until they are freed.
  std::unordered_map<void*, std::uint64_t> pool_blocks_;
  std::uint64_t next_pool_id_ = 1;
  // The pool receiving this device's allocations and frees, 0 for none. Read without the
  // mutex on every allocation; changed under it.
  std::atomic<std::uint64_t> routing_{0};
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

DeviceMemoryInfo device_memory_info(int device) {
  cuda_allocator(device);  // fails with the reason when the device cannot be used
  const DeviceGuard guard(device);
  std::size_t free_bytes = 0, total_bytes = 0;
  ALLOY_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes),
                   "reading the memory of cuda:", device);
  return {static_cast<std::int64_t>(free_bytes), static_cast<std::int64_t>(total_bytes)};
}

GraphPool::GraphPool(int device) : device_(device) {
  cuda_allocator(device);  // fails with the reason when the device cannot be used
  id_ = allocator_of(device).create_pool();
}

GraphPool::~GraphPool() {
  allocator_of(device_).destroy_pool(id_);
}

PoolStatistics GraphPool::statistics() const {
  return allocator_of(device_).pool_statistics(id_);
}

PoolRouting::PoolRouting(GraphPool& pool) : pool_(pool) {
  allocator_of(pool.device()).begin_routing(pool.id());
}

PoolRouting::~PoolRouting() {
  allocator_of(pool_.device()).end_routing(pool_.id());
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
