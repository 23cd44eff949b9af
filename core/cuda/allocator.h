// The caching device allocator. Like PyTorch's, it keeps freed blocks in per-size-class free
// lists and hands them out again, so once a training step has run, the steps after it call
// cudaMalloc no more: cudaMalloc and cudaFree synchronise the device and cost far more than a
// small step's kernels. Memory statistics (MemoryStats, per category) count the bytes callers
// asked for, exactly as on the CPU; the cache's own figures are separate.
#pragma once

#include <cstddef>
#include <cstdint>

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
// Returns every cached (free) block to the driver; blocks in use are untouched.
void empty_cache(int device);

}  // namespace alloy::cuda
