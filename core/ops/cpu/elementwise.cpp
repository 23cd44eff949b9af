#include "core/ops/elementwise.h"

#include <array>

#include "core/half.h"
#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

template <class Element, class Convert>
void lookup_images(const std::uint8_t* images, void* y, std::int64_t count,
                   const Convert& convert) {
  // 256 possible inputs: convert each once, so every dtype gets the same rounded quotient.
  std::array<Element, 256> table;
  for (int value = 0; value < 256; ++value) {
    table[static_cast<std::size_t>(value)] = convert(static_cast<float>(value) / 255.0f);
  }
  auto* out = static_cast<Element*>(y);
  parallel_ranges(count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      out[i] = table[images[i]];
  });
}

}  // namespace

void cast(const void* x, DType x_dtype, void* y, DType y_dtype, std::int64_t count) {
  for_element_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    ElementScratch scratch;
    store_floats(load_floats(x, x_dtype, offset, n, scratch.data()), y, y_dtype, offset, n);
  });
}

void add(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y, std::int64_t count) {
  map_floats(a, a_dtype, b, b_dtype, y, a_dtype, count, [](float av, float bv) { return av + bv; });
}

void axpby(float alpha, const void* x, DType x_dtype, float beta, void* y, DType y_dtype,
           std::int64_t count) {
  for_element_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    ElementScratch x_scratch, y_scratch;
    const float* xv = load_floats(x, x_dtype, offset, n, x_scratch.data());
    float* out = output_floats(y, y_dtype, offset, y_scratch.data());
    if (beta == 0.0f) {
      for (std::int64_t i = 0; i < n; ++i)
        out[i] = alpha * xv[i];
    } else {
      // yv and out are the same memory; each element is read before it is written.
      const float* yv = load_floats(y, y_dtype, offset, n, y_scratch.data());
      for (std::int64_t i = 0; i < n; ++i)
        out[i] = alpha * xv[i] + beta * yv[i];
    }
    store_floats(out, y, y_dtype, offset, n);
  });
}

void scale(void* x, DType dtype, float alpha, std::int64_t count) {
  for_element_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    ElementScratch scratch;
    const float* in = load_floats(x, dtype, offset, n, scratch.data());
    float* out = output_floats(x, dtype, offset, scratch.data());
    for (std::int64_t i = 0; i < n; ++i)
      out[i] = in[i] * alpha;
    store_floats(out, x, dtype, offset, n);
  });
}

void normalize_images(const std::uint8_t* images, void* y, DType dtype, std::int64_t count) {
  switch (dtype) {
    case DType::f16:
      return lookup_images<std::uint16_t>(images, y, count, float_to_half_bits);
    case DType::bf16:
      return lookup_images<std::uint16_t>(images, y, count, float_to_bf16_bits);
    default:
      return lookup_images<float>(images, y, count, [](float value) { return value; });
  }
}

}  // namespace alloy::cpu
