#include "core/host_reads.h"

#include <atomic>

namespace alloy {

namespace {
std::atomic<std::uint64_t> reads{0};
}  // namespace

std::uint64_t host_read_count() {
  return reads.load(std::memory_order_relaxed);
}

void note_host_read() {
  reads.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace alloy
