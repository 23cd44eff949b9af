// Memory accounting: every allocation carries a category, and each device keeps current
// and peak bytes per category and in total. This is the single source of the figures that
// `alloy mem` and the epoch log's peak_memory_bytes report.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/device.h"

namespace alloy {

enum class MemoryCategory : std::uint8_t {
  parameters,
  master_parameters,
  gradients,
  optimizer_state,
  activations,
  workspace,
  data,
  communication,
};

constexpr std::size_t kMemoryCategoryCount = 8;

const char* memory_category_name(MemoryCategory category);

struct MemorySnapshot {
  std::array<std::int64_t, kMemoryCategoryCount> current{};
  std::array<std::int64_t, kMemoryCategoryCount> peak{};  // each category's own peak
  std::int64_t total_current = 0;
  std::int64_t total_peak = 0;  // peak of the sum, not the sum of peaks

  std::int64_t current_of(MemoryCategory c) const { return current[static_cast<int>(c)]; }
  std::int64_t peak_of(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
};

// Thread-safe byte counters for one device.
class MemoryStats {
 public:
  void on_allocate(MemoryCategory category, std::size_t bytes);
  void on_free(MemoryCategory category, std::size_t bytes);
  MemorySnapshot snapshot() const;
  // Peaks restart from the current figures (used between `alloy mem` levels and per epoch).
  void reset_peaks();

 private:
  mutable std::mutex mutex_;
  MemorySnapshot state_;
};

// Raw allocation on one device, accounted in its MemoryStats.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t bytes, MemoryCategory category) = 0;
  virtual void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) = 0;
  virtual Device device() const = 0;
  MemoryStats& stats() { return stats_; }

 private:
  MemoryStats stats_;
};

// The process-wide allocator of a device. CUDA allocators come from the CUDA backend and
// fail with a clear error in a CPU-only build.
Allocator& allocator_for(Device device);

// Shorthand for allocator_for(device).stats().
MemoryStats& memory_stats(Device device);

// The host allocator's block cache (blocks of 64 KiB and more are reused by size; smaller ones
// go back to malloc). The memory statistics above count what callers hold, not the cache.
// Each system allocation of a cached size is also the CPU's device allocation in
// core/round_trips.h.
struct HostCacheStatistics {
  std::uint64_t system_allocations = 0;  // blocks taken from the system allocator
  std::uint64_t reuses = 0;              // requests served from the cache
  std::size_t cached_bytes = 0;          // held in the cache now, free for reuse
};
HostCacheStatistics host_cache_statistics();
// Returns every cached block to the system.
void release_host_cache();

}  // namespace alloy
