// Conversions between the two 4-D activation layouts (core/layout.h): exact copies of any dtype.
// Per image both are a transpose of a [rows, cols] matrix: NCHW -> NHWC is [C, HW] -> [HW, C].
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace alloy {

// [N, C, H, W] -> [N, H, W, C].
Tensor to_channels_last(const Tensor& x);
// [N, H, W, C] -> [N, C, H, W].
Tensor to_channels_first(const Tensor& x);

namespace cpu {

// out[i, c, r] = in[i, r, c] for `images` row-major [rows, cols] matrices of `element_size`-byte
// elements (1, 2 or 4).
void transpose_images(const void* in, void* out, std::size_t element_size, std::int64_t images,
                      std::int64_t rows, std::int64_t cols);

}  // namespace cpu

}  // namespace alloy
