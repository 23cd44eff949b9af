// The seam between ALLOY_LAUNCH (core/ops/cuda/common.cuh) and a CUDA emulator. Core declares
// it and the emulator (tools/cuda_emulator, linked only by an emulated build) defines
// emulated_launch, so the kernels depend on this interface and never on the emulator's own
// headers. A build for a GPU never includes it: ALLOY_LAUNCH is then `<<<...>>>`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <utility>

namespace alloy::cuda {

// Checks the configuration as a GPU does, then queues on `stream` one run of the grid in which
// every CUDA thread calls `thread_body` once. Errors are recorded as the calling thread's last
// error, as a real launch's are, and returned.
cudaError_t emulated_launch(const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
                            cudaStream_t stream, std::function<void()> thread_body);

// ALLOY_LAUNCH(kernel, ...)(args...) in an emulated build: the arguments are copied when the
// launch is made, as CUDA copies kernel parameters, and the kernel later runs on the copies.
template <class Call>
class EmulatedLaunch {
 public:
  EmulatedLaunch(const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
                 cudaStream_t stream, Call call)
      : kernel_(kernel),
        grid_(grid),
        block_(block),
        shared_bytes_(shared_bytes),
        stream_(stream),
        call_(std::move(call)) {}

  template <class... Args>
  void operator()(Args... args) const {
    emulated_launch(kernel_, grid_, block_, shared_bytes_, stream_,
                    [call = call_, args...] { call(args...); });
  }

 private:
  const char* kernel_;
  dim3 grid_;
  dim3 block_;
  std::size_t shared_bytes_;
  cudaStream_t stream_;
  Call call_;
};

}  // namespace alloy::cuda
