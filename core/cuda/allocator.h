// The caching device allocator. Like PyTorch's, it keeps freed blocks in per-size-class free
// lists and hands them out again, so once a training step has run, the steps after it call
// cudaMalloc no more: cudaMalloc and cudaFree synchronise the device and cost far more than a
// small step's kernels. Memory statistics (MemoryStats, per category) count the bytes callers
// asked for, exactly as on the CPU; the cache's own figures are separate.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/memory.h"

namespace alloy::cuda {

struct CacheStatistics {
  std::int64_t malloc_calls = 0;    // cudaMalloc calls since the process started
  std::int64_t free_calls = 0;      // cudaFree calls (cache releases)
  std::int64_t cache_hits = 0;      // allocations served from a free list
  std::int64_t reserved_bytes = 0;  // held from the driver: in use plus cached
  std::int64_t cached_bytes = 0;    // held in free lists
  std::int64_t peak_reserved_bytes = 0;
};

// The rounded size of a block serving `bytes`: a multiple of 512 bytes up to 1 MiB, then of
// 2 MiB. Blocks are reused only for requests of the same rounded size.
std::size_t cache_block_size(std::size_t bytes);

CacheStatistics cache_statistics(int device);

// The driver's view of a device's memory (cudaMemGetInfo): every process's allocations, the
// CUDA context and the libraries' own memory included, so it is more than this process's
// reserved bytes.
struct DeviceMemoryInfo {
  std::int64_t free_bytes = 0;
  std::int64_t total_bytes = 0;
  std::int64_t used_bytes() const { return total_bytes - free_bytes; }
};
DeviceMemoryInfo device_memory_info(int device);
// Returns every cached (free) block to the driver; blocks in use are untouched.
void empty_cache(int device);

// What a GraphPool holds. Bytes in use are the bytes callers asked for, as in MemoryStats.
struct PoolStatistics {
  std::int64_t blocks = 0;          // blocks the pool owns, free or in use
  std::int64_t reserved_bytes = 0;  // their rounded sizes
  std::int64_t in_use_bytes = 0;    // requested bytes of the pool's blocks in use now
  std::array<std::int64_t, kMemoryCategoryCount> in_use{};  // the same, per category
  // The pool's highest in_use_bytes, and its figures per category at that moment.
  std::int64_t peak_in_use_bytes = 0;
  std::array<std::int64_t, kMemoryCategoryCount> in_use_at_peak{};
};

// A private pool of a device's caching allocator, for one captured CUDA graph
// (core/cuda/graph.h). A graph replays its kernels at the addresses they had when captured, so
// memory the graph touches must never be handed to other work while the graph may run again:
// - while a PoolRouting names the pool, every allocation on its device comes from the pool (a
//   free pool block, else a cached block of the device that the pool adopts, else a new
//   cudaMalloc), and every block freed on that device joins the pool, also one allocated
//   before (the graph may read it);
// - afterwards a pool block that is freed goes back to the pool, never to the device's cache;
// - when the pool is destroyed (with its graph), its free blocks go back to the device's cache,
//   and its blocks still in use go there when they are freed.
// One pool routes at a time per device; while it routes, allocations by any thread on that
// device go to it (a training step captures on one thread and allocates on no other).
class GraphPool {
 public:
  explicit GraphPool(int device);
  ~GraphPool();
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;

  int device() const { return device_; }
  std::uint64_t id() const { return id_; }
  PoolStatistics statistics() const;

 private:
  int device_;
  std::uint64_t id_;
};

// Routes the allocations and frees of the pool's device to the pool for its lifetime
// (begun and ended by a stream capture, core/cuda/graph.h). Fails when another pool routes.
class PoolRouting {
 public:
  explicit PoolRouting(GraphPool& pool);
  ~PoolRouting();
  PoolRouting(const PoolRouting&) = delete;
  PoolRouting& operator=(const PoolRouting&) = delete;

 private:
  GraphPool& pool_;
};

}  // namespace alloy::cuda
