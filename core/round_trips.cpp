#include "core/round_trips.h"

#include <atomic>
#include <ostream>

namespace alloy {

namespace {

// Relaxed: each counter is a tally read between steps, never a synchronisation point.
std::atomic<std::uint64_t> uploads{0};
std::atomic<std::uint64_t> downloads{0};
std::atomic<std::uint64_t> host_waits{0};
std::atomic<std::uint64_t> backpressure_waits{0};
std::atomic<std::uint64_t> device_allocations{0};

void add_one(std::atomic<std::uint64_t>& counter) {
  counter.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

RoundTrips& RoundTrips::operator+=(const RoundTrips& other) {
  uploads += other.uploads;
  downloads += other.downloads;
  host_waits += other.host_waits;
  backpressure_waits += other.backpressure_waits;
  device_allocations += other.device_allocations;
  return *this;
}

bool RoundTrips::operator==(const RoundTrips& other) const {
  return uploads == other.uploads && downloads == other.downloads &&
         host_waits == other.host_waits && backpressure_waits == other.backpressure_waits &&
         device_allocations == other.device_allocations;
}

RoundTrips operator-(const RoundTrips& later, const RoundTrips& earlier) {
  RoundTrips difference;
  difference.uploads = later.uploads - earlier.uploads;
  difference.downloads = later.downloads - earlier.downloads;
  difference.host_waits = later.host_waits - earlier.host_waits;
  difference.backpressure_waits = later.backpressure_waits - earlier.backpressure_waits;
  difference.device_allocations = later.device_allocations - earlier.device_allocations;
  return difference;
}

std::ostream& operator<<(std::ostream& out, const RoundTrips& counts) {
  return out << "uploads " << counts.uploads << ", downloads " << counts.downloads
             << ", host_waits " << counts.host_waits << ", backpressure_waits "
             << counts.backpressure_waits << ", device_allocations " << counts.device_allocations;
}

RoundTrips round_trips() {
  RoundTrips counts;
  counts.uploads = uploads.load(std::memory_order_relaxed);
  counts.downloads = downloads.load(std::memory_order_relaxed);
  counts.host_waits = host_waits.load(std::memory_order_relaxed);
  counts.backpressure_waits = backpressure_waits.load(std::memory_order_relaxed);
  counts.device_allocations = device_allocations.load(std::memory_order_relaxed);
  return counts;
}

void count_upload() {
  add_one(uploads);
}

void count_download() {
  add_one(downloads);
}

void count_host_wait() {
  add_one(host_waits);
}

void count_backpressure_wait() {
  add_one(backpressure_waits);
}

void count_device_allocation() {
  add_one(device_allocations);
}

}  // namespace alloy
