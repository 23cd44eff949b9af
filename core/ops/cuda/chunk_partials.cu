#include "core/ops/cuda/chunk_partials.h"

#include <cstdint>

#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

namespace {

template <class T>
__global__ void add_chunk_partials_kernel(const float* __restrict__ partials, int chunks, int count,
                                          T* out, bool accumulate) {
  ALLOY_GRID_STRIDE_32(i, static_cast<unsigned int>(count)) {
    float sum = 0.0f;
    for (int chunk = 0; chunk < chunks; ++chunk)
      sum += partials[static_cast<std::int64_t>(chunk) * count + i];
    out[i] = narrow<T>(accumulate ? __fadd_rn(widen(out[i]), sum) : sum);
  }
}

}  // namespace

void add_chunk_partials(const float* partials, int chunks, int count, void* out, DType dtype,
                        bool accumulate, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_floating(dtype, "add_chunk_partials", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(add_chunk_partials_kernel, grid_for(count), kThreads, 0, stream)
    (partials, chunks, count, static_cast<T*>(out), accumulate);
    ALLOY_CUDA_CHECK_LAUNCH("add_chunk_partials_kernel over ", count, " values of ", chunks,
                            " chunks");
  });
}

}  // namespace alloy::cuda
