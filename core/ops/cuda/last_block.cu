#include "core/cuda/context.h"
#include "core/ops/cuda/last_block.h"

namespace alloy::cuda {

namespace {
constexpr int kMaxDevices = 64;

int current_device() {
  int device = -1;
  ALLOY_CUDA_CHECK(cudaGetDevice(&device), "reading the current device");
  ALLOY_CHECK(device >= 0 && device < kMaxDevices, "cuda:", device, " is not a valid device");
  return device;
}
}  // namespace

unsigned int* arrival_counter(ArrivalSlot slot) {
  static_assert(static_cast<std::size_t>(ArrivalSlot::count) <= kArrivalCounters,
                "core/cuda/context.h keeps too few arrival counters");
  return context(Device::cuda(current_device())).arrival_counters.as<unsigned int>() +
         static_cast<int>(slot);
}

DeviceBuffer reduction_workspace(std::size_t bytes) {
  return DeviceBuffer(bytes, Device::cuda(current_device()), MemoryCategory::workspace);
}

}  // namespace alloy::cuda
