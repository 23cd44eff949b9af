// Page-locked host memory (cudaHostAlloc): the only host memory a device copies from
// asynchronously. Owned, movable, freed with cudaFreeHost. The owner makes sure no copy still
// reads or writes it when it is freed (record an event after the copy and wait for it).
#pragma once

#include <cstddef>

namespace alloy::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* get() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace alloy::cuda
