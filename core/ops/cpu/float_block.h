// Block-wise access to float-typed storage for CPU kernels. A kernel widens one row, plane or
// block into fp32 scratch, computes, and narrows its result once. Half tensors thus never need
// a whole-tensor fp32 copy, which would cost a memory pass and distort the memory accounting.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/dtype.h"
#include "core/ops/cpu/convert.h"
#include "core/ops/cpu/parallel.h"

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

// Elementwise kernels walk a tensor in blocks of this many elements, each widened into and
// narrowed from stack scratch of this type.
constexpr std::int64_t kElementBlock = 1024;
using ElementScratch = std::array<float, kElementBlock>;

// Calls body(offset, count) for consecutive blocks of [0, total), blocks split over the pool.
template <class Body>
void for_element_blocks(std::int64_t total, const Body& body) {
  parallel_ranges(total, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t offset = begin; offset < end; offset += kElementBlock) {
      body(offset, std::min(kElementBlock, end - offset));
    }
  });
}

// y[i] = f(a[i], b[i]) for count elements, computed in fp32 and rounded once to y_dtype.
template <class F>
void map_floats(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y, DType y_dtype,
                std::int64_t count, const F& f) {
  for_element_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    ElementScratch a_scratch, b_scratch, y_scratch;
    const float* av = load_floats(a, a_dtype, offset, n, a_scratch.data());
    const float* bv = load_floats(b, b_dtype, offset, n, b_scratch.data());
    float* out = output_floats(y, y_dtype, offset, y_scratch.data());
    for (std::int64_t i = 0; i < n; ++i)
      out[i] = f(av[i], bv[i]);
    store_floats(out, y, y_dtype, offset, n);
  });
}

}  // namespace alloy::cpu
