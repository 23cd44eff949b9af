// How CPU kernels split work over the thread pool. Chunks are static (see ThreadPool), and
// kernels that reduce keep one partial per fixed unit of work (a plane, a row) and combine the
// partials in index order, so their results do not depend on the chunking at all.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"

namespace alloy::cpu {

// Below this much work (elements touched) a fork/join costs more than it saves.
constexpr std::int64_t kParallelWork = std::int64_t{1} << 15;

// Calls body(begin, end) over contiguous slices of [0, count): one per pool thread, or a single
// call on this thread when count * work_per_item is small. Never call it from inside a body.
template <class Body>
void parallel_ranges(std::int64_t count, std::int64_t work_per_item, const Body& body) {
  if (count <= 0) return;
  ThreadPool& pool = cpu_pool();
  if (pool.size() == 1 || count == 1 || count * work_per_item < kParallelWork) {
    body(std::int64_t{0}, count);
    return;
  }
  pool.parallel_for(count, [&](std::int64_t begin, std::int64_t end, int) { body(begin, end); });
}

}  // namespace alloy::cpu
