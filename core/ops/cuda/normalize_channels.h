// CUDA twin of core/ops/normalize_channels.h's kernel: the same table look-ups and one rounding,
// bitwise equal to the CPU's. Asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cuda {

void normalize_channels(const std::uint8_t* images, const float* table, void* y, DType dtype,
                        std::int64_t batch, std::int64_t channels, std::int64_t plane,
                        cudaStream_t stream);

}  // namespace alloy::cuda
