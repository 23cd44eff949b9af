// The CUDA entry points of a CPU-only build: each says plainly that CUDA is not compiled in.
#include "core/backend.h"
#include "core/cuda/allocator.h"
#include "core/error.h"

namespace alloy {

Allocator& cuda_allocator(int index) {
  fail("cuda:", index, " requested, but this build of Alloy has no CUDA backend");
}

void cuda_copy_bytes(void*, Device destination, const void*, Device source, std::size_t) {
  fail("copy from ", source.str(), " to ", destination.str(),
       " needs the CUDA backend, which this build does not have");
}

std::unique_ptr<CapturedWork> capture_cuda_work(Device device, const std::function<void()>&) {
  fail("capturing a CUDA graph on ", device.str(),
       " needs the CUDA backend, which this build does not have");
}

bool cuda_available(std::string* reason) {
  if (reason) *reason = "built without the CUDA backend";
  return false;
}

}  // namespace alloy

namespace alloy::cuda {

CacheStatistics cache_statistics(int device) {
  fail("the block cache of cuda:", device,
       " needs the CUDA backend, which this build does not have");
}

void empty_cache(int device) {
  fail("emptying the block cache of cuda:", device,
       " needs the CUDA backend, which this build does not have");
}

}  // namespace alloy::cuda
