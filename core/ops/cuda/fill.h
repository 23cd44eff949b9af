// CUDA twin of core/ops/fill.h's kernel: zero is a cudaMemsetAsync, any other pattern a
// grid-stride kernel; both are queued on `stream` and never wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace alloy::cuda {

void fill(void* data, std::size_t element_size, std::uint32_t pattern, std::int64_t count,
          cudaStream_t stream);

}  // namespace alloy::cuda
