// Elementwise ops training needs. Arithmetic runs in fp32 and rounds once to the output's
// dtype. Shapes must match exactly (no broadcasting).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

// A copy of x in `dtype` (round to nearest even; overflow gives inf).
Tensor cast(const Tensor& x, DType dtype, MemoryCategory category = MemoryCategory::activations);
// Converts x into an existing tensor of the same shape (any floating dtypes).
void cast_into(const Tensor& x, Tensor& out);

// a + b, in a's dtype (b may have another floating dtype).
Tensor add(const Tensor& a, const Tensor& b);
// y = alpha * x + beta * y, in place (x and y may differ in dtype). beta == 0 ignores y's
// old contents, NaN included.
void axpby(float alpha, const Tensor& x, float beta, Tensor& y);
// x *= alpha, in place.
void scale(Tensor& x, float alpha);

// u8 images -> `dtype`, scaled by 1/255 into [0, 1].
Tensor normalize_images(const Tensor& images, DType dtype);

// Flatten [N, ...] (at least 2 dimensions) to [N, rest]: a view sharing storage.
Tensor flatten(const Tensor& x);

namespace cpu {
// count elements each; every pointer is storage of the dtype beside it.
void cast(const void* x, DType x_dtype, void* y, DType y_dtype, std::int64_t count);
void add(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y,
         std::int64_t count);  // y in a's dtype
void axpby(float alpha, const void* x, DType x_dtype, float beta, void* y, DType y_dtype,
           std::int64_t count);
void scale(void* x, DType dtype, float alpha, std::int64_t count);
void normalize_images(const std::uint8_t* images, void* y, DType dtype, std::int64_t count);
}  // namespace cpu

}  // namespace alloy
