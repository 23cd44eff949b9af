#include "core/ops/relu.h"

#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Sign tests on raw 16-bit patterns: kInf is the format's +inf (0x7c00 for f16, 0x7f80 for
// bf16); patterns above it, with either sign, are NaN.
template <std::uint16_t kInf>
struct HalfBits {
  using Element = std::uint16_t;
  // Patterns 1 .. kInf are the positive numbers.
  static bool positive(std::uint16_t bits) { return static_cast<std::uint16_t>(bits - 1u) < kInf; }
  // Negative numbers and -0 become +0; NaN (any sign) stays.
  static std::uint16_t relu(std::uint16_t bits) {
    return static_cast<std::uint16_t>(bits - 0x8000u) <= kInf ? std::uint16_t{0} : bits;
  }
};

struct Float {
  using Element = float;
  static bool positive(float value) { return value > 0.0f; }
  static float relu(float value) { return value <= 0.0f ? 0.0f : value; }
};

using F16 = HalfBits<0x7c00u>;
using BF16 = HalfBits<0x7f80u>;

template <class Format>
void forward(const void* x, void* y, std::int64_t count) {
  const auto* in = static_cast<const typename Format::Element*>(x);
  auto* out = static_cast<typename Format::Element*>(y);
  parallel_ranges(count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      out[i] = Format::relu(in[i]);
  });
}

template <class YFormat, class Element>
void backward(const void* y, const void* dy, void* dx, std::int64_t count) {
  const auto* out = static_cast<const typename YFormat::Element*>(y);
  const auto* grad = static_cast<const Element*>(dy);
  auto* result = static_cast<Element*>(dx);
  parallel_ranges(count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      result[i] = YFormat::positive(out[i]) ? grad[i] : Element{0};
    }
  });
}

// f16 and bf16 gradients are both passed through as 16-bit patterns.
template <class YFormat>
void backward_for(const void* y, const void* dy, void* dx, DType dy_dtype, std::int64_t count) {
  if (dy_dtype == DType::f32) {
    backward<YFormat, float>(y, dy, dx, count);
  } else {
    backward<YFormat, std::uint16_t>(y, dy, dx, count);
  }
}

}  // namespace

void relu_forward(const void* x, void* y, DType dtype, std::int64_t count) {
  switch (dtype) {
    case DType::f16:
      return forward<F16>(x, y, count);
    case DType::bf16:
      return forward<BF16>(x, y, count);
    default:
      return forward<Float>(x, y, count);
  }
}

void relu_backward(const void* y, DType y_dtype, const void* dy, void* dx, DType dy_dtype,
                   std::int64_t count) {
  switch (y_dtype) {
    case DType::f16:
      return backward_for<F16>(y, dy, dx, dy_dtype, count);
    case DType::bf16:
      return backward_for<BF16>(y, dy, dx, dy_dtype, count);
    default:
      return backward_for<Float>(y, dy, dx, dy_dtype, count);
  }
}

}  // namespace alloy::cpu
