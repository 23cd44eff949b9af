#include <array>
#include <mutex>

#include "core/cuda/handles.h"
#include "core/forever.h"
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

unsigned int* arrival_counter(ArrivalSlot slot, cudaStream_t stream) {
  const int device = current_device();
  // Never destroyed, like the allocators and contexts (core/forever.h).
  static Forever<std::array<DeviceBuffer, kMaxDevices>> counters;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  DeviceBuffer& buffer = counters.get()[static_cast<std::size_t>(device)];
  if (buffer.get() == nullptr) {
    // Inside a capture the zeroing would only be recorded, not run, and the counters (from the
    // graph's pool) would start as garbage for eager work if the capture then failed: refuse,
    // so the capture fails and the step runs eagerly, which creates them.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    ALLOY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture),
                     "asking whether a stream of cuda:", device, " is capturing");
    ALLOY_CHECK(capture == cudaStreamCaptureStatusNone, "cuda:", device,
                ": the grid reductions' arrival counters are first needed inside a CUDA-graph "
                "capture; they must be created by eager work first (a warm-up step does)");
    constexpr std::size_t bytes = sizeof(unsigned int) * static_cast<int>(ArrivalSlot::count);
    buffer = DeviceBuffer(bytes, Device::cuda(device), MemoryCategory::workspace);
    ALLOY_CUDA_CHECK(cudaMemsetAsync(buffer.get(), 0, bytes, stream),
                     "zeroing the arrival counters of cuda:", device);
  }
  return buffer.as<unsigned int>() + static_cast<int>(slot);
}

DeviceBuffer reduction_workspace(std::size_t bytes) {
  return DeviceBuffer(bytes, Device::cuda(current_device()), MemoryCategory::workspace);
}

}  // namespace alloy::cuda
