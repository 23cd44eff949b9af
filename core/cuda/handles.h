// RAII owners of CUDA objects: streams, events, cuBLAS/cuBLASLt/cuDNN handles and device
// buffers from the caching allocator. Each is created on a given device, is movable but not
// copyable, and releases its object in the destructor. Destructors never throw: a failure there
// (typically the driver already shutting down at process exit) is ignored, since nothing useful
// can be done with it.
#pragma once

#include <cstddef>
#include <utility>

#include "core/cuda/check.h"
#include "core/device.h"
#include "core/memory.h"

namespace alloy::cuda {

// Polls an event: true once the work recorded before it has finished, false while it is
// pending. cudaEventQuery reports "pending" as cudaErrorNotReady, which the runtime also keeps
// as the thread's last error; it is cleared here, so that it never resurfaces at an unrelated
// ALLOY_CUDA_CHECK_LAUNCH (which reads cudaGetLastError). Other statuses throw, naming `what`.
bool event_done(cudaEvent_t event, const char* what);
// The decision of event_done on a status that cudaEventQuery returned.
bool event_status_done(cudaError_t status, const char* what);
// For destructors: waits for `event` if its work is still pending (counted as a host wait),
// clearing the pending status as event_done does. Never throws: a failure here means the
// driver is going away.
void finish_event_quietly(cudaEvent_t event) noexcept;

// Makes `device` current for the guard's lifetime and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// One owned handle of type Handle, released by Destroy. The shared move logic of the types
// below.
template <class Handle, auto Destroy>
class Owned {
 public:
  Owned() = default;
  explicit Owned(Handle handle) : handle_(handle) {}
  ~Owned() { reset(); }
  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  Handle get() const { return handle_; }
  // Gives up ownership without destroying.
  Handle release() { return std::exchange(handle_, Handle{}); }

 private:
  void reset() {
    if (handle_ != Handle{}) static_cast<void>(Destroy(handle_));
    handle_ = Handle{};
  }
  Handle handle_{};
};

// A non-blocking stream (it does not synchronise with the legacy default stream).
class Stream {
 public:
  explicit Stream(int device);
  cudaStream_t get() const { return stream_.get(); }
  int device() const { return device_; }
  void synchronize(const char* why) const;  // the host waits: counted (core/round_trips.h)

 private:
  Owned<cudaStream_t, cudaStreamDestroy> stream_;
  int device_;
};

// Timing disabled unless asked for: such events are cheaper to record and wait on.
class Event {
 public:
  explicit Event(int device, bool timing = false);
  cudaEvent_t get() const { return event_.get(); }
  void record(cudaStream_t stream);
  void wait(cudaStream_t stream) const;  // the stream waits; the host does not
  void synchronize() const;              // the host waits: counted (core/round_trips.h)
  // Polls without waiting; clears the not-ready status (see event_done).
  bool done(const char* what = "querying an event") const { return event_done(event_.get(), what); }
  // Milliseconds from `start` to this event; both recorded with timing on.
  float elapsed_ms_since(const Event& start) const;

 private:
  Owned<cudaEvent_t, cudaEventDestroy> event_;
};

// Device memory from the device's caching allocator, accounted under `category`; returned to
// the allocator's cache (not to cudaFree) on destruction. Reuse is safe because every kernel of
// a device runs on that device's one stream (see core/cuda/context.h), in issue order.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, Device device, MemoryCategory category);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_ = Device::cuda(0);
  MemoryCategory category_ = MemoryCategory::workspace;
};

// cuBLAS handle bound to one stream. Default math mode: fp32 GEMMs stay true fp32 (no TF32,
// as the numerics contract wants); half GEMMs use tensor cores with fp32 accumulation, and
// reduced-precision (half) split-k reductions are disallowed. The handle's workspace comes
// from the caching allocator (category workspace), so cuBLAS allocates nothing of its own and
// its calls are capturable in a CUDA graph; cuBLASLt calls on the same stream share it.
class CublasHandle {
 public:
  // NVIDIA's recommended cuBLAS workspace for Hopper.
  static constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;

  CublasHandle(int device, cudaStream_t stream);
  cublasHandle_t get() const { return handle_.get(); }
  void* workspace() const { return workspace_.get(); }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  DeviceBuffer workspace_;  // declared first: the handle is destroyed before its workspace
  Owned<cublasHandle_t, cublasDestroy> handle_;
};

class CublasLtHandle {
 public:
  explicit CublasLtHandle(int device);
  cublasLtHandle_t get() const { return handle_.get(); }

 private:
  Owned<cublasLtHandle_t, cublasLtDestroy> handle_;
};

class CudnnHandle {
 public:
  CudnnHandle(int device, cudaStream_t stream);
  cudnnHandle_t get() const { return handle_.get(); }

 private:
  Owned<cudnnHandle_t, cudnnDestroy> handle_;
};

}  // namespace alloy::cuda
