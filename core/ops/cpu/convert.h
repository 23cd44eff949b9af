// Bulk conversions between fp32 and 16-bit storage, bit-exact with core/half.h (and so with
// CUDA): round to nearest even, overflow to inf, every NaN to the canonical NaN. Half storage
// on the CPU converts at every op boundary, so these run vectorised (F16C/AVX2) where the
// processor has them, checked at run time.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cpu {

// dtype is f16 or bf16.
void widen_16(const std::uint16_t* in, DType dtype, float* out, std::int64_t count);
void narrow_16(const float* in, std::uint16_t* out, DType dtype, std::int64_t count);

// Whether the vector paths are in use on this machine (tests report it).
bool vector_conversions();

}  // namespace alloy::cpu
