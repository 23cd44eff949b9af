// CUDA twins of core/ops/relu.h's kernels; exact in every dtype, like the CPU ones.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cuda {

void relu_forward(const void* x, void* y, DType dtype, std::int64_t count, cudaStream_t stream);
void relu_backward(const void* y, DType y_dtype, const void* dy, void* dx, DType dy_dtype,
                   std::int64_t count, cudaStream_t stream);

}  // namespace alloy::cuda
