// One element of f32, f16 or bf16 storage as a float, for CPU kernels that mix dtypes
// element by element (amp's unscale, data parallelism's bucket copies). Conversions are
// core/half.h's, so bit-exact with CUDA's.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"

namespace alloy::cpu {

inline float load_element(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f16:
      return half_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::bf16:
      return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

// Rounds to nearest even into a half type.
inline void store_element(void* data, DType dtype, std::int64_t i, float value) {
  switch (dtype) {
    case DType::f16:
      static_cast<std::uint16_t*>(data)[i] = float_to_half_bits(value);
      break;
    case DType::bf16:
      static_cast<std::uint16_t*>(data)[i] = float_to_bf16_bits(value);
      break;
    default:
      static_cast<float*>(data)[i] = value;
      break;
  }
}

}  // namespace alloy::cpu
