// Copies and memsets. Directions are checked against the registries: a device side must lie
// inside one live allocation, a host side must not touch device memory. A copy from pageable
// host memory snapshots its source at the call (CUDA stages it); a copy into pageable memory
// completes before the call returns (CUDA makes it synchronous); pinned memory is read and
// written when the copy runs.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tools/cuda_emulator/runtime.h"

namespace alloy::emulator {

namespace {

enum class Side { pageable, pinned, device };

// What `pointer` is as the side of a copy of `bytes` expected to be `expected` (a device,
// host or either side); false when it cannot be one.
bool classify(const void* pointer, std::size_t bytes, bool device_allowed, bool host_allowed,
              Side* side) {
  if (find_allocation(pointer, bytes) != nullptr) {
    *side = Side::device;
    return device_allowed;
  }
  if (!host_allowed || touches_device_memory(pointer, bytes)) return false;
  *side = is_pinned(pointer, bytes) ? Side::pinned : Side::pageable;
  return true;
}

const char* direction_name(Side destination, Side source) {
  if (source == Side::device)
    return destination == Side::device ? "device to device" : "device to host";
  return destination == Side::device ? "host to device" : "host to host";
}

cudaError_t copy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                 CUstream_st& stream, bool synchronous) {
  bool device_destination = true, host_destination = true;
  bool device_source = true, host_source = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      device_destination = device_source = false;
      break;
    case cudaMemcpyHostToDevice:
      host_destination = device_source = false;
      break;
    case cudaMemcpyDeviceToHost:
      device_destination = host_source = false;
      break;
    case cudaMemcpyDeviceToDevice:
      host_destination = host_source = false;
      break;
    case cudaMemcpyDefault:
      break;
    default:
      return cudaErrorInvalidMemcpyDirection;
  }
  if (bytes == 0) return cudaSuccess;
  Side to = Side::device, from = Side::device;
  if (destination == nullptr || source == nullptr ||
      !classify(destination, bytes, device_destination, host_destination, &to) ||
      !classify(source, bytes, device_source, host_source, &from)) {
    return cudaErrorInvalidValue;
  }
  const bool pageable = to == Side::pageable || from == Side::pageable;
  if (stream.capture && pageable) {
    // A graph cannot stage pageable memory at each replay.
    invalidate(*stream.capture);
    return cudaErrorStreamCaptureUnsupported;
  }
  // A copy into pageable memory, or a blocking one other than device to device, waits.
  const bool waits =
      to == Side::pageable || (synchronous && !(to == Side::device && from == Side::device));
  // CUDA may synchronise any copy with pageable memory: potentially unsafe during a capture.
  if (waits || pageable) {
    if (const cudaError_t refused = check_unsafe_call()) return refused;
  }
  std::string name =
      std::string("a ") + direction_name(to, from) + " copy of " + std::to_string(bytes) + " bytes";
  Work work;
  if (from == Side::pageable) {
    auto snapshot = std::make_shared<std::vector<char>>(static_cast<const char*>(source),
                                                        static_cast<const char*>(source) + bytes);
    work = Work{std::move(name), [destination, snapshot] {
                  std::memcpy(destination, snapshot->data(), snapshot->size());
                }};
  } else {
    work = Work{std::move(name),
                [destination, source, bytes] { std::memcpy(destination, source, bytes); }};
  }
  if (const cudaError_t status = enqueue_item(stream, Item{std::move(work), WorkKind::device})) {
    return status;
  }
  if (!waits) return cudaSuccess;
  run_until(stream, stream.issued);
  return device_error(stream.device);
}

}  // namespace

}  // namespace alloy::emulator

using namespace alloy::emulator;

cudaError_t cudaMemcpyAsync(void* destination, const void* source, std::size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t handle) {
  const auto lock = lock_runtime();
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  return fail(copy(destination, source, bytes, kind, *stream, /*synchronous=*/false));
}

cudaError_t cudaMemcpy(void* destination, const void* source, std::size_t bytes,
                       cudaMemcpyKind kind) {
  const auto lock = lock_runtime();
  return fail(copy(destination, source, bytes, kind, *find_stream(nullptr), /*synchronous=*/true));
}

cudaError_t cudaMemcpyPeerAsync(void* destination, int destination_device, const void* source,
                                int source_device, std::size_t bytes, cudaStream_t handle) {
  const auto lock = lock_runtime();
  if (!valid_device(destination_device) || !valid_device(source_device)) {
    return fail(cudaErrorInvalidDevice);
  }
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  const Allocation* to = find_allocation(destination, bytes);
  const Allocation* from = find_allocation(source, bytes);
  if (to == nullptr || from == nullptr || to->device != destination_device ||
      from->device != source_device) {
    return fail(cudaErrorInvalidValue);
  }
  return fail(enqueue_item(
      *stream, Item{Work{"a peer copy of " + std::to_string(bytes) + " bytes",
                         [destination, source, bytes] { std::memcpy(destination, source, bytes); }},
                    WorkKind::device}));
}

cudaError_t cudaMemsetAsync(void* destination, int value, std::size_t bytes, cudaStream_t handle) {
  const auto lock = lock_runtime();
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (bytes == 0) return cudaSuccess;
  if (find_allocation(destination, bytes) == nullptr) return fail(cudaErrorInvalidValue);
  return fail(enqueue_item(
      *stream, Item{Work{"a memset of " + std::to_string(bytes) + " bytes",
                         [destination, value, bytes] { std::memset(destination, value, bytes); }},
                    WorkKind::device}));
}
