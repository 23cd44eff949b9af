#include "apps/train/device_choice.h"

#include <cstdlib>

#include "core/backend.h"
#include "core/error.h"
#include "core/setting_error.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#endif

namespace alloy::app {

namespace {

int cuda_index(const std::string& flag) {
  const std::string digits = flag.substr(5);  // after "cuda:"
  char* end = nullptr;
  const long index = std::strtol(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || index < 0 || index > 1023) {
    setting_fail("{device} '", flag, "': the device index must be a number, as in cuda:0");
  }
  return static_cast<int>(index);
}

std::string devices(int count) {
  return detail::concat(count, " CUDA device", count == 1 ? "" : "s");
}

// The GPU of the local rank, checked against the machine's count.
Device local_rank_device(const parallel::Rendezvous& placement, const CudaDevices& cuda) {
  if (placement.local_rank >= cuda.count) {
    setting_failure(
        "local rank ", placement.local_rank, " needs cuda:", placement.local_rank,
        ", but this machine has ", devices(cuda.count), " (local rank from ", placement.source,
        "); start at most ", cuda.count, " rank", cuda.count == 1 ? "" : "s",
        " per node, or name one device for all of them with {device} cuda:0 {dist_backend} gloo");
  }
  return Device::cuda(placement.local_rank);
}

// "device cuda:1 (auto, local rank 1 of torchrun (RANK, WORLD_SIZE))".
std::string explain(const Device& device, std::string how, const parallel::Rendezvous& placement) {
  if (placement.distributed()) {
    how += detail::concat(how.empty() ? "" : ", ", "local rank ", placement.local_rank, " of ",
                          placement.source);
  }
  return "device " + device.str() + (how.empty() ? "" : " (" + how + ")");
}

}  // namespace

CudaDevices probe_cuda_devices() {
  CudaDevices cuda;
  if (!cuda_available(&cuda.reason)) return cuda;
#ifdef ALLOY_HAVE_CUDA
  cuda.count = cuda::usable_device_count();
#endif
  return cuda;
}

DeviceChoice choose_device(const std::string& flag, const parallel::Rendezvous& placement,
                           const CudaDevices& cuda) {
  if (flag == "cpu") return {Device::cpu(), "device cpu"};
  if (flag == "auto") {
    if (cuda.count == 0) {
      return {Device::cpu(), "device cpu (auto: no usable CUDA device: " + cuda.reason + ")"};
    }
    const Device device = local_rank_device(placement, cuda);
    return {device, explain(device, "auto", placement)};
  }
  // Parsed before the availability check, so that a malformed index is a usage error anywhere.
  const int index = flag == "cuda" ? -1 : cuda_index(flag);
  if (cuda.count == 0) setting_failure("{device} ", flag, ": no usable CUDA device: ", cuda.reason);
  if (index < 0) {
    const Device device = local_rank_device(placement, cuda);
    return {device, explain(device, "", placement)};
  }
  if (index >= cuda.count) {
    setting_failure("{device} ", flag, ": this machine has ", devices(cuda.count),
                    " (cuda:0..cuda:", cuda.count - 1, ")");
  }
  return {Device::cuda(index), "device " + flag};
}

DeviceChoice choose_device(const std::string& flag) {
  return choose_device(flag, parallel::Rendezvous{}, probe_cuda_devices());
}

void make_current(const Device& device) {
  if (!device.is_cuda()) return;
#ifdef ALLOY_HAVE_CUDA
  ALLOY_CUDA_CHECK(cudaSetDevice(device.index), "making ", device.str(), " this process's device");
#endif
}

}  // namespace alloy::app
