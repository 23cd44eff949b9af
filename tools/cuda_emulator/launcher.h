// ALLOY_LAUNCH's emulated form (core/ops/cuda/common.cuh): a launch that copies the kernel's
// arguments when it is made, as CUDA copies kernel parameters, and hands the grid to the
// emulated stream.
#pragma once

#include <cstddef>
#include <utility>

#include "tools/cuda_emulator/emulator.h"

namespace alloy::emulator {

template <class Call>
class Launcher {
 public:
  Launcher(const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream,
           Call call)
      : kernel_(kernel),
        grid_(grid),
        block_(block),
        shared_bytes_(shared_bytes),
        stream_(stream),
        call_(std::move(call)) {}

  // Errors are recorded as the thread's last error, as a real launch's are.
  template <class... Args>
  void operator()(Args... args) const {
    launch_kernel(kernel_, grid_, block_, shared_bytes_, stream_,
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

}  // namespace alloy::emulator
