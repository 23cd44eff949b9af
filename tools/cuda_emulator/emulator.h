// The CUDA emulator's internal interface: how the emulated libraries (cuBLAS, cuBLASLt, cuDNN,
// NCCL) hand work to the emulated streams, and how they check the pointers they are given.
// Nothing outside tools/cuda_emulator includes it; kernel launches come in through the seam
// that core declares (core/cuda/emulated_launch.h).
//
// The emulator replaces the CUDA runtime and those libraries with host code, so that the
// project's CUDA backend (every .cu file, compiled as C++ with prelude.h) and every gpu test run
// on a machine without a GPU (docs/cuda_emulator.md). Device memory is host memory, streams are
// queues of host work run in order at the points where a real GPU could have finished it, and
// kernels run one block at a time, each CUDA thread a fiber.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>

namespace alloy::emulator {

// A fault of running device work (a kernel's divergent barrier, a library call on memory that
// is not the device's): the context's sticky error, as an illegal address is on a GPU. The
// runtime prints the message once and fails every later call with `status`.
class DeviceFault : public std::runtime_error {
 public:
  explicit DeviceFault(const std::string& message, cudaError_t status = cudaErrorLaunchFailure)
      : std::runtime_error(message), status_(status) {}
  cudaError_t status() const { return status_; }

 private:
  cudaError_t status_;
};

// One piece of stream work: `run` executes on the host when the stream reaches it; `name`
// names it in fault messages ("kernel relu_forward_kernel", "cublasGemmEx").
struct Work {
  std::string name;
  std::function<void()> run;
};

// Queues work on `stream` (0: the legacy default stream), or appends it to the graph that
// `stream` is capturing. Returns the error a runtime call would report (an invalid stream, a
// sticky fault, an invalidated capture).
cudaError_t enqueue(cudaStream_t stream, Work work);

// Whether [pointer, pointer + bytes) lies inside one live device allocation of the current
// device (bytes 0: whether pointer is inside one or one past its end).
bool is_device_range(const void* pointer, std::size_t bytes);

// Throws DeviceFault naming `what` unless is_device_range(pointer, bytes): for the emulated
// libraries, whose real twins would fault on such a pointer.
void require_device_range(const void* pointer, std::size_t bytes, const std::string& what);

}  // namespace alloy::emulator
