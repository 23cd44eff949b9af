#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/normalize_channels.h"

namespace alloy::cuda {

namespace {

// One element per iteration: the table (a few KiB) stays in L1, the u8 reads coalesce.
template <class T>
__global__ void normalize_channels_kernel(const std::uint8_t* images, const float* table, T* y,
                                          std::int64_t count, std::int64_t channels,
                                          std::int64_t plane) {
  ALLOY_GRID_STRIDE(i, count) {
    const std::int64_t channel = (i / plane) % channels;
    y[i] = narrow<T>(table[channel * 256 + images[i]]);
  }
}

}  // namespace

void normalize_channels(const std::uint8_t* images, const float* table, void* y, DType dtype,
                        std::int64_t batch, std::int64_t channels, std::int64_t plane,
                        cudaStream_t stream) {
  const std::int64_t count = batch * channels * plane;
  if (count == 0) return;
  dispatch_floating(dtype, "normalize_channels", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(normalize_channels_kernel, grid_for(count), kThreads, 0, stream)
    (images, table, static_cast<T*>(y), count, channels, plane);
  });
  ALLOY_CUDA_CHECK_LAUNCH("normalize_channels_kernel on ", count, " elements of ", channels,
                          " channels");
}

}  // namespace alloy::cuda
