// CUDA twin of core/ops/dropout.h's kernel: the same counters, the same fp32 arithmetic, so the
// same bits as the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/dropout.h"

namespace alloy::cuda {

// out = in * (keep ? scale : 0); the step count is read through `step` when the kernel runs.
void dropout(const void* in, void* out, DType dtype, std::int64_t rows, std::int64_t columns,
             const DropoutMask& mask, const std::int32_t* step, cudaStream_t stream);

}  // namespace alloy::cuda
