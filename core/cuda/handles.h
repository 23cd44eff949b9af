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
  bool done() const;                     // whether the recorded work is complete; no wait
  // Milliseconds from `start` to this event; both recorded with timing on.
  float elapsed_ms_since(const Event& start) const;

 private:
  Owned<cudaEvent_t, cudaEventDestroy> event_;
};

// cuBLAS handle bound to one stream. Default math mode: fp32 GEMMs stay true fp32 (no TF32,
// as the numerics contract wants); half GEMMs use tensor cores with fp32 accumulation.
class CublasHandle {
 public:
  CublasHandle(int device, cudaStream_t stream);
  cublasHandle_t get() const { return handle_.get(); }

 private:
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

}  // namespace alloy::cuda
