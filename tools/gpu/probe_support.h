// What the GPU measurement tools (conv_algorithms, gemm_algorithms) share: CUDA status checks
// that throw, zeroed device buffers, an owner for a library handle, events, and the best time
// of a call over rounds. Tools, not the library: errors are std::runtime_error for main().
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

namespace alloy::probe {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using Buffer = std::unique_ptr<void, CudaFree>;

// At least one byte, zeroed.
inline Buffer device_buffer(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  Buffer buffer(p);
  check(cudaMemset(p, 0, bytes == 0 ? 1 : bytes), "cudaMemset");
  return buffer;
}

// A library handle (cuDNN's, cuBLAS's, a descriptor) destroyed with `Destroy`.
template <class T, auto Destroy>
struct Owned {
  T raw = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (raw != nullptr) Destroy(raw);
  }
};

class Event {
 public:
  Event() { check(cudaEventCreate(&raw_), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(raw_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return raw_; }

 private:
  cudaEvent_t raw_ = nullptr;
};

// Milliseconds a call of `run` takes on the default stream: after one untimed call (which loads
// the kernels), the best of `rounds` rounds of `calls` calls between two events, per call.
template <class Run>
float best_time_ms(const Run& run, int rounds, int calls = 1) {
  const Event start, stop;
  run();
  float best = std::numeric_limits<float>::infinity();
  for (int round = 0; round < rounds; ++round) {
    check(cudaEventRecord(start.get(), nullptr), "cudaEventRecord");
    for (int call = 0; call < calls; ++call)
      run();
    check(cudaEventRecord(stop.get(), nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop.get()), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start.get(), stop.get()), "cudaEventElapsedTime");
    best = std::min(best, ms / static_cast<float>(calls));
  }
  return best;
}

}  // namespace alloy::probe
