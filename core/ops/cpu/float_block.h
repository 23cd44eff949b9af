// Block-wise access to float-typed storage for CPU kernels. A kernel widens one row, plane or
// block into fp32 scratch, computes, and narrows its result once. Half tensors thus never need
// a whole-tensor fp32 copy, which would cost a memory pass and distort the memory accounting.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/ops/cpu/convert.h"

namespace alloy::cpu {

// Elements [offset, offset + count) of `data` as fp32: `data` itself when it is f32 (no copy),
// otherwise widened into `scratch`, which must hold count floats.
inline const float* load_floats(const void* data, DType dtype, std::int64_t offset,
                                std::int64_t count, float* scratch) {
  if (dtype == DType::f32) return static_cast<const float*>(data) + offset;
  widen_16(static_cast<const std::uint16_t*>(data) + offset, dtype, scratch, count);
  return scratch;
}

// Where a kernel should write fp32 results for elements [offset, ...) of `data`: in place when
// it is f32, otherwise in `scratch`, to be narrowed by store_floats.
inline float* output_floats(void* data, DType dtype, std::int64_t offset, float* scratch) {
  return dtype == DType::f32 ? static_cast<float*>(data) + offset : scratch;
}

// Writes count fp32 values to elements [offset, offset + count) of `data`, rounding each once
// to its dtype. Values already in place (from output_floats on f32 data) are left as they are.
inline void store_floats(const float* values, void* data, DType dtype, std::int64_t offset,
                         std::int64_t count) {
  if (dtype == DType::f32) {
    float* target = static_cast<float*>(data) + offset;
    if (target == values) return;
    for (std::int64_t i = 0; i < count; ++i)
      target[i] = values[i];
    return;
  }
  narrow_16(values, static_cast<std::uint16_t*>(data) + offset, dtype, count);
}

}  // namespace alloy::cpu
