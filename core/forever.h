// Process-lifetime objects that are never destroyed. Allocators (host and CUDA) and CUDA
// contexts must outlive every tensor, including tensors in static storage destroyed at exit in
// an order no one controls; and destroying cuBLAS/cuDNN handles or freeing memory after the
// driver has begun its own teardown can crash. The system reclaims everything at exit anyway.
#pragma once

#include <new>
#include <utility>

namespace alloy {

template <class T>
class Forever {
 public:
  template <class... Args>
  explicit Forever(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
  }
  Forever(const Forever&) = delete;
  Forever& operator=(const Forever&) = delete;

  T& get() { return *std::launder(reinterpret_cast<T*>(storage_)); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace alloy
