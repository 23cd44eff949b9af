// y = max(x, 0); NaN propagates. Backward uses the output: dx = dy where y > 0, else 0.
// Both are exact in every dtype (they select values, never compute new ones), so the CPU
// kernels work on the stored values directly.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

// y has x's dtype.
Tensor relu_forward(const Tensor& x);
// y and dy have one shape and any floating dtypes; dx has dy's dtype.
Tensor relu_backward(const Tensor& y, const Tensor& dy);

namespace cpu {
void relu_forward(const void* x, void* y, DType dtype, std::int64_t count);
void relu_backward(const void* y, DType y_dtype, const void* dy, void* dx, DType dy_dtype,
                   std::int64_t count);
}  // namespace cpu

}  // namespace alloy
