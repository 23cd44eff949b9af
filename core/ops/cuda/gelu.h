// CUDA twins of core/ops/gelu.h's kernels, on the same scalar functions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/gelu.h"

namespace alloy::cuda {

void gelu_forward(const void* x, void* y, DType dtype, GeluApproximation approximation,
                  std::int64_t count, cudaStream_t stream);
void gelu_backward(const void* x, DType x_dtype, const void* dy, void* dx, DType dy_dtype,
                   GeluApproximation approximation, std::int64_t count, cudaStream_t stream);

}  // namespace alloy::cuda
