// Runs a kernel's grid on the host: blocks one after another, every CUDA thread of a block a
// fiber of its own, so that __syncthreads and warp shuffles can suspend a thread until its
// block or warp has caught up (device.h's builtins call into this engine).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

namespace alloy::emulator {

// The error a GPU gives a launch of this shape (cudaErrorInvalidConfiguration for a zero or
// oversized grid or block, too many threads per block, or more shared memory than a block
// may have), or cudaSuccess.
cudaError_t check_launch_configuration(dim3 grid, dim3 block, std::size_t dynamic_shared);

// Runs every thread of every block of the grid through `thread_body`. Throws DeviceFault
// (emulator.h) naming `kernel`, the block and the threads when the kernel breaks the rules a
// GPU leaves undefined: a __syncthreads that not every thread of the block reaches, a warp
// shuffle that a lane named in its mask does not join, a wmma call that not every lane of the
// warp makes alike.
void run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& thread_body);

}  // namespace alloy::emulator
