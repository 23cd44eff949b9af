// CUDA twins of core/ops/add_relu.h's kernels: fp32 arithmetic, one rounding to the output's
// dtype, bitwise equal to the CPU ones. Asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cuda {

void add_relu_forward(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y,
                      std::int64_t count, cudaStream_t stream);  // y in a's dtype
void add_relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype,
                       const void* d_main, DType d_main_dtype, void* dx, std::int64_t count,
                       cudaStream_t stream);  // dx in d_main's dtype

}  // namespace alloy::cuda
