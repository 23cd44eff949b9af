// Entry points the CUDA backend provides. A CPU-only build links core/cuda_stub.cpp instead,
// whose versions fail with a message saying CUDA is not compiled in.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/memory.h"

namespace alloy {

// True when a CUDA device can be used; otherwise `reason` (if given) says why not.
bool cuda_available(std::string* reason = nullptr);
Allocator& cuda_allocator(int index);
void cuda_copy_bytes(void* destination, Device destination_device, const void* source,
                     Device source_device, std::size_t bytes);

// Device work captured once and replayed as a whole: a CUDA graph with the private memory
// pool its allocations came from (core/cuda/graph.h). A replay repeats the captured kernels
// and copies on the same addresses; it runs none of the host code that issued them.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Issues the work again on its device's stream (the host does not wait).
  virtual void replay() = 0;
  // The graph's nodes (kernels, copies, memsets): what one replay launches.
  virtual std::size_t nodes() const = 0;
  // Bytes per memory category that the work held at its peak during capture beyond what it
  // left allocated: what each replay uses again, for the memory statistics.
  virtual std::array<std::int64_t, kMemoryCategoryCount> replay_bytes() const = 0;
};

// Runs `work` on this thread with `device`'s stream capturing, its allocations coming from a
// new private pool, and returns the captured work, not yet run on the device. When the work
// cannot be captured (it synchronises with the host, copies from pageable host memory, ...),
// throws Error naming the call that failed; the device then has run none of it, and the
// stream is usable again.
std::unique_ptr<CapturedWork> capture_cuda_work(Device device, const std::function<void()>& work);

}  // namespace alloy
