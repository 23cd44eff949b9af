// Per-thread fp32 scratch for CPU kernels that split their work over the thread pool: one
// workspace tensor (so the memory report counts it), one slice per pool thread.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace alloy::cpu {

class ThreadScratch {
 public:
  ThreadScratch(std::int64_t per_thread, bool zeroed)
      : per_thread_(per_thread),
        buffer_(zeroed ? Tensor::zeros({cpu_threads() * per_thread}, DType::f32, Device::cpu(),
                                       MemoryCategory::workspace)
                       : Tensor::empty({cpu_threads() * per_thread}, DType::f32, Device::cpu(),
                                       MemoryCategory::workspace)) {}
  // The slice of the pool's thread `chunk` (parallel_for's chunk argument).
  float* slice(int chunk) const { return buffer_.data<float>() + chunk * per_thread_; }

 private:
  std::int64_t per_thread_;
  Tensor buffer_;
};

}  // namespace alloy::cpu
