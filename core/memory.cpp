#include "core/memory.h"

#include <cstdlib>
#include <new>

#include "core/backend.h"
#include "core/error.h"

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

// 64-byte aligned host memory, so vector kernels never straddle cache lines at a buffer start.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes, MemoryCategory category) override {
    constexpr std::size_t kAlignment = 64;
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* pointer = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (pointer == nullptr) {
      fail("out of host memory: could not allocate ", bytes, " bytes for ",
           memory_category_name(category));
    }
    stats().on_allocate(category, bytes);
    return pointer;
  }

  void deallocate(void* pointer, std::size_t bytes, MemoryCategory category) override {
    std::free(pointer);
    stats().on_free(category, bytes);
  }

  Device device() const override { return Device::cpu(); }
};

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) {
    static CpuAllocator cpu;
    return cpu;
  }
  return cuda_allocator(device.index);
}

MemoryStats& memory_stats(Device device) {
  return allocator_for(device).stats();
}

}  // namespace alloy
