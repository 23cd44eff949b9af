// CUDA twins of the elementwise kernels of core/ops/elementwise.h: fp32 arithmetic, one
// rounding to the output's dtype. Asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cuda {

void cast(const void* x, DType x_dtype, void* y, DType y_dtype, std::int64_t count,
          cudaStream_t stream);
void add(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y, std::int64_t count,
         cudaStream_t stream);  // y in a's dtype
void axpby(float alpha, const void* x, DType x_dtype, float beta, void* y, DType y_dtype,
           std::int64_t count, cudaStream_t stream);
void scale(void* x, DType dtype, float alpha, std::int64_t count, cudaStream_t stream);
void normalize_images(const std::uint8_t* images, void* y, DType dtype, std::int64_t count,
                      cudaStream_t stream);

}  // namespace alloy::cuda
