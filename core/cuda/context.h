// Per-device state of the CUDA backend: one stream on which every kernel, copy and library
// call of that device is issued, and the cuBLAS, cuBLASLt and cuDNN handles bound to it.
// One stream per device keeps the caching allocator simple and safe (a freed block's last use
// is ordered before its next one) and makes a step a single stream, capturable in a CUDA
// graph. Contexts are created on first use and live until the process exits.
#pragma once

#include <cstddef>

#include "core/cuda/handles.h"
#include "core/device.h"

namespace alloy::cuda {

// The arrival counters of the ops' one-launch grid reductions (core/ops/cuda/last_block.h).
constexpr std::size_t kArrivalCounters = 16;

struct DeviceContext {
  explicit DeviceContext(int device);

  int device;
  Stream stream;
  CublasHandle cublas;
  CublasLtHandle cublas_lt;
  CudnnHandle cudnn;
  // Zeroed on `stream` at creation. Built with the context, like everything a device holds for
  // the whole process, so that none of it appears in the middle of a measurement or a capture.
  DeviceBuffer arrival_counters;
};

// The number of usable devices; throws with cuda_available()'s reason when there is none.
int usable_device_count();

// The context of a CUDA device (created on first use, with the device made current).
DeviceContext& context(Device device);
inline cudaStream_t stream_of(Device device) {
  return context(device).stream.get();
}

// Blocks the host until the device's stream has finished its work; `why` names the caller.
// A host wait (core/round_trips.h).
void synchronize(Device device, const char* why);

// Queues a copy of `bytes` from pinned host memory (cudaHostAlloc) to `destination` on
// `device`'s memory on `stream`, and returns at once: an upload without a host wait. The
// source must stay unchanged until the copy is done; record an event on `stream` after this
// call and wait for it before reusing the source. Synchronous copies: cuda_copy_bytes.
void upload_async(void* destination, Device device, const void* pinned_source, std::size_t bytes,
                  cudaStream_t stream);

// Queues a copy of `bytes` from `source` in `device`'s memory to pinned host memory on `stream`,
// and returns at once: a download whose host wait comes later, where the host reads the copy
// (record an event on `stream` after this call and synchronise it there). Work queued on
// `stream` after this call cannot change what the copy reads.
void download_async(void* pinned_destination, const void* source, Device device, std::size_t bytes,
                    cudaStream_t stream);

}  // namespace alloy::cuda
