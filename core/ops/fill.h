// Sets every element of a tensor to one value, in place: the work of Tensor::fill and
// Tensor::zeros. Device work on every backend: no host buffer of the tensor's size, no upload,
// no wait (zero is a memset; any other value a kernel writing the element's bit pattern).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace alloy {

// `value` is stored as copy_from_floats would store it: rounded to nearest even for f16 and
// bf16, truncated toward zero for u8 and i32 (out of range or NaN there is an error).
void fill(Tensor& tensor, float value);

// The bits of `value` stored in `dtype`, in the low dtype_size(dtype) bytes.
std::uint32_t fill_pattern(float value, DType dtype);

namespace cpu {
// `count` elements of `element_size` bytes (1, 2 or 4), each set to the low bytes of `pattern`.
void fill(void* data, std::size_t element_size, std::uint32_t pattern, std::int64_t count);
}  // namespace cpu

}  // namespace alloy
