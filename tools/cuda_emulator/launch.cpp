// Kernel launches: the configuration is checked at the launch, as a GPU does, and the grid
// runs when its stream reaches it.
#include <string>
#include <utility>

#include "core/cuda/emulated_launch.h"
#include "tools/cuda_emulator/kernel.h"
#include "tools/cuda_emulator/runtime.h"

// The emulator's side of the seam that ALLOY_LAUNCH calls (core/cuda/emulated_launch.h).
cudaError_t alloy::cuda::emulated_launch(const char* kernel, dim3 grid, dim3 block,
                                         std::size_t dynamic_shared, cudaStream_t handle,
                                         std::function<void()> thread_body) {
  using namespace alloy::emulator;
  const auto lock = lock_runtime();
  if (const cudaError_t sticky = device_error(this_thread().device)) return fail(sticky);
  if (const cudaError_t invalid = check_launch_configuration(grid, block, dynamic_shared)) {
    return fail(invalid);
  }
  CUstream_st* stream = find_stream(handle);
  // A kernel runs on the current device: a stream of another one is no valid handle here.
  if (stream == nullptr || stream->device != this_thread().device) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  Work work{std::string("kernel ") + kernel, [kernel, grid, block, body = std::move(thread_body)] {
              run_grid(kernel, grid, block, body);
            }};
  return fail(enqueue_item(*stream, Item{std::move(work), WorkKind::device}));
}
