#include "core/cuda/pinned_buffer.h"

#include <utility>

#include "core/cuda/check.h"

namespace alloy::cuda {

PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
  ALLOY_CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault), "allocating ", bytes,
                   " bytes of pinned host memory");
}

PinnedBuffer::~PinnedBuffer() {
  release();
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedBuffer::release() noexcept {
  // Never throws (see core/cuda/handles.h): a failure at exit leaves nothing to do.
  if (data_ != nullptr) static_cast<void>(cudaFreeHost(data_));
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace alloy::cuda
