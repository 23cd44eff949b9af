#include <cstring>

#include "core/half.h"
#include "parallel/ops/bucket.h"

namespace alloy::parallel::cpu {

namespace {

float load(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f16:
      return half_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::bf16:
      return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

void store(void* data, DType dtype, std::int64_t i, float value) {
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

}  // namespace

void scaled_copy(const void* from, DType from_dtype, void* to, DType to_dtype, std::int64_t count,
                 float factor) {
  const auto bytes = static_cast<std::size_t>(count) * dtype_size(to_dtype);
  if (from == nullptr) {
    std::memset(to, 0, bytes);
    return;
  }
  if (from_dtype == to_dtype && factor == 1.0f) {
    std::memcpy(to, from, bytes);
    return;
  }
  for (std::int64_t i = 0; i < count; ++i)
    store(to, to_dtype, i, load(from, from_dtype, i) * factor);
}

}  // namespace alloy::parallel::cpu
