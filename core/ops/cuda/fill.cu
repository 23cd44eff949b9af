#include "core/error.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/fill.h"

namespace alloy::cuda {

namespace {

template <class T>
__global__ void fill_kernel(T* data, T value, std::int64_t count) {
  ALLOY_GRID_STRIDE(i, count) {
    data[i] = value;
  }
}

template <class T>
void launch(void* data, std::uint32_t pattern, std::int64_t count, cudaStream_t stream) {
  ALLOY_LAUNCH(fill_kernel, grid_for(count), kThreads, 0, stream)
  (static_cast<T*>(data), static_cast<T>(pattern), count);
}

}  // namespace

void fill(void* data, std::size_t element_size, std::uint32_t pattern, std::int64_t count,
          cudaStream_t stream) {
  if (count <= 0) return;
  const std::size_t bytes = static_cast<std::size_t>(count) * element_size;
  if (pattern == 0) {
    ALLOY_CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, stream), "zeroing ", bytes, " bytes");
    return;
  }
  switch (element_size) {
    case 1:
      launch<std::uint8_t>(data, pattern, count, stream);
      break;
    case 2:
      launch<std::uint16_t>(data, pattern, count, stream);
      break;
    case 4:
      launch<std::uint32_t>(data, pattern, count, stream);
      break;
    default:
      fail("fill: elements of ", element_size, " bytes are not supported");
  }
  ALLOY_CUDA_CHECK_LAUNCH("fill_kernel on ", count, " elements of ", element_size, " bytes");
}

}  // namespace alloy::cuda
