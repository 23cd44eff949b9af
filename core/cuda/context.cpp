#include "core/cuda/context.h"

#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "core/backend.h"
#include "core/forever.h"
#include "core/round_trips.h"

namespace alloy::cuda {

namespace {

constexpr int kMaxDevices = 64;
// Every kernel is compiled for sm_90 (SASS) and compute_90 (PTX); older GPUs cannot run them.
constexpr int kMinimumMajor = 9;

struct Probe {
  int count = 0;
  std::string reason;  // empty when count > 0
};

// The devices are probed once: the answer cannot change within a process, and the first CUDA
// call is the slow one (it creates the runtime's context).
const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      p.reason = "cudaGetDeviceCount failed: " + status_text(status);
      return p;
    }
    if (count == 0) {
      p.reason = "cudaGetDeviceCount found no CUDA device";
      return p;
    }
    cudaDeviceProp properties{};
    const cudaError_t props = cudaGetDeviceProperties(&properties, 0);
    if (props != cudaSuccess) {
      p.reason = "cudaGetDeviceProperties(cuda:0) failed: " + status_text(props);
      return p;
    }
    if (properties.major < kMinimumMajor) {
      p.reason = detail::concat("cuda:0 (", properties.name, ") has compute capability ",
                                properties.major, ".", properties.minor,
                                ", but this build has kernels for 9.0 and newer only "
                                "(reconfigure with -DCMAKE_CUDA_ARCHITECTURES=native)");
      return p;
    }
    p.count = count;
    return p;
  }();
  return result;
}

}  // namespace

DeviceContext::DeviceContext(int index)
    : device(index),
      stream(index),
      cublas(index, stream.get()),
      cublas_lt(index),
      cudnn(index, stream.get()),
      arrival_counters(kArrivalCounters * sizeof(unsigned int), Device::cuda(index),
                       MemoryCategory::workspace) {
  ALLOY_CUDA_CHECK(
      cudaMemsetAsync(arrival_counters.get(), 0, arrival_counters.bytes(), stream.get()),
      "zeroing the arrival counters of cuda:", index);
}

int usable_device_count() {
  const Probe& p = probe();
  if (p.count == 0) fail("no usable CUDA device: ", p.reason);
  return p.count;
}

DeviceContext& context(Device device) {
  ALLOY_CHECK(device.is_cuda(), "the CUDA backend was handed a ", device.str(), " tensor");
  const int count = usable_device_count();
  ALLOY_CHECK(device.index >= 0 && device.index < count && device.index < kMaxDevices, device.str(),
              " requested, but this machine has ", count, " CUDA device", count == 1 ? "" : "s");
  static Forever<std::array<std::unique_ptr<DeviceContext>, kMaxDevices>> contexts;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = contexts.get()[static_cast<std::size_t>(device.index)];
  if (!slot) slot = std::make_unique<DeviceContext>(device.index);
  // Kernel launches go to the current device: make it this tensor's.
  int current = -1;
  ALLOY_CUDA_CHECK(cudaGetDevice(&current), "reading the current device");
  if (current != device.index) {
    ALLOY_CUDA_CHECK(cudaSetDevice(device.index), "selecting ", device.str());
  }
  return *slot;
}

void synchronize(Device device, const char* why) {
  context(device).stream.synchronize(why);
}

void upload_async(void* destination, Device device, const void* pinned_source, std::size_t bytes,
                  cudaStream_t stream) {
  if (bytes == 0) return;
  const DeviceGuard guard(device.index);
  ALLOY_CUDA_CHECK(
      cudaMemcpyAsync(destination, pinned_source, bytes, cudaMemcpyHostToDevice, stream),
      "uploading ", bytes, " bytes from pinned memory to ", device.str());
  count_upload();
}

void download_async(void* pinned_destination, const void* source, Device device, std::size_t bytes,
                    cudaStream_t stream) {
  if (bytes == 0) return;
  const DeviceGuard guard(device.index);
  ALLOY_CUDA_CHECK(
      cudaMemcpyAsync(pinned_destination, source, bytes, cudaMemcpyDeviceToHost, stream),
      "downloading ", bytes, " bytes from ", device.str(), " to pinned memory");
  count_download();
}

}  // namespace alloy::cuda

namespace alloy {

bool cuda_available(std::string* reason) {
  const cuda::Probe& p = cuda::probe();
  if (reason) *reason = p.reason;
  return p.count > 0;
}

void cuda_copy_bytes(void* destination, Device destination_device, const void* source,
                     Device source_device, std::size_t bytes) {
  if (bytes == 0) return;
  const auto what = [&] {
    return detail::concat("copying ", bytes, " bytes from ", source_device.str(), " to ",
                          destination_device.str());
  };
  if (destination_device.is_cpu() && source_device.is_cpu()) {
    std::memcpy(destination, source, bytes);
    return;
  }
  // Copies touching the host wait for completion: the host buffer may be reused or freed as
  // soon as this returns, and a device-to-host copy must be readable at once. Each is an
  // upload or a download, and its wait a host wait (core/round_trips.h).
  if (source_device.is_cpu()) {
    cuda::DeviceContext& ctx = cuda::context(destination_device);
    ALLOY_CUDA_CHECK(
        cudaMemcpyAsync(destination, source, bytes, cudaMemcpyHostToDevice, ctx.stream.get()),
        what());
    count_upload();
    ctx.stream.synchronize("waiting for a host-to-device copy");
    return;
  }
  if (destination_device.is_cpu()) {
    cuda::DeviceContext& ctx = cuda::context(source_device);
    ALLOY_CUDA_CHECK(
        cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToHost, ctx.stream.get()),
        what());
    count_download();
    ctx.stream.synchronize("waiting for a device-to-host copy");
    return;
  }
  if (destination_device == source_device) {
    cuda::DeviceContext& ctx = cuda::context(destination_device);
    ALLOY_CUDA_CHECK(
        cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDeviceToDevice, ctx.stream.get()),
        what());
    return;
  }
  // Between devices: the source's pending work must be done before the copy reads it.
  cuda::synchronize(source_device, "finishing work before a copy between devices");
  cuda::DeviceContext& ctx = cuda::context(destination_device);
  ALLOY_CUDA_CHECK(cudaMemcpyPeerAsync(destination, destination_device.index, source,
                                       source_device.index, bytes, ctx.stream.get()),
                   what());
  ctx.stream.synchronize("waiting for a copy between devices");
}

}  // namespace alloy
