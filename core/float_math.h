// fp32 exp in plain arithmetic, shared by CPU and CUDA kernels (ALLOY_HOST_DEVICE). libm's expf
// is an opaque call per element, which keeps GCC from vectorising a loop around it; this one has
// no calls and no data-dependent branches (its selects become blends), so such loops vectorise.
// Within an ulp of the exact exp (0.7 measured), with its limits: 0 below -104, inf above
// 88.8, NaN for NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/float_bits.h"
#include "core/host_device.h"

namespace alloy {

namespace float_math_detail {
// ln 2 = kLn2Hi + kLn2Lo, kLn2Hi with 9 significant bits, so that n * kLn2Hi is exact.
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kLog2e = 1.44269504088896341f;
// Adding and subtracting 1.5 * 2^23 rounds a float of magnitude below 2^22 to an integer.
constexpr float kRoundToInteger = 12582912.0f;
// Beyond these exp has overflowed or underflowed in fp32; within them (and |lo| <= 4) 2^n
// is the product of two normal powers of two.
constexpr float kRangeLimit = 120.0f;

// 2^n for n in [-126, 127], from the exponent bits.
ALLOY_HOST_DEVICE inline float power_of_two(std::int32_t n) {
  return float_of(static_cast<std::uint32_t>(n + 127) << 23);
}
}  // namespace float_math_detail

// condition ? a : b, through bit masks: GCC sinks whatever feeds only one side of a ternary into
// a branch, and then cannot vectorise the loop around it without masked instructions (AVX-512).
ALLOY_HOST_DEVICE inline float float_select(bool condition, float a, float b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(condition);
  return float_of((bits_of(a) & mask) | (bits_of(b) & ~mask));
}

// exp(hi + lo) for lo finite and |lo| <= 4 wherever hi is finite. The pair keeps the argument's
// low bits when hi + lo would round them away (GELU's -x^2 / 2, exact as a pair through an FMA);
// the result's limits follow hi alone.
ALLOY_HOST_DEVICE inline float exp_sum(float hi, float lo) {
  using namespace float_math_detail;
  // n = round((hi + lo) / ln 2), read from the low bits of the shifted float: a conversion to int
  // would be undefined for NaN and huge sums (which the selects below replace), and clamping
  // first keeps GCC from vectorising (it moves the clamp's cases into branches).
  const float shifted = (hi + lo) * kLog2e + kRoundToInteger;
  const float nf = shifted - kRoundToInteger;
  const auto n = static_cast<std::int32_t>(bits_of(shifted) - bits_of(kRoundToInteger));
  // Cody-Waite: r = hi + lo - n ln 2 with |r| <= ln 2 / 2 (hi - n kLn2Hi is exact for large hi).
  const float r = std::fma(-nf, kLn2Lo, std::fma(-nf, kLn2Hi, hi) + lo);
  // Taylor to degree 7: the truncation is below 6e-9 relative for |r| <= 0.35.
  float p = 1.0f / 5040.0f;
  p = std::fma(p, r, 1.0f / 720.0f);
  p = std::fma(p, r, 1.0f / 120.0f);
  p = std::fma(p, r, 1.0f / 24.0f);
  p = std::fma(p, r, 1.0f / 6.0f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r * r, r);
  // The small terms are summed before the 1, which rounds once, last.
  const float e = 1.0f + p;
  // 2^n in two factors, so that results down to the subnormals round once, at the last product.
  const std::int32_t n1 = n / 2;
  const float value = e * power_of_two(n1) * power_of_two(n - n1);
  const float below_high = float_select(hi < kRangeLimit, value, INFINITY);
  const float limited = float_select(hi > -kRangeLimit, below_high, 0.0f);
  return float_select(hi == hi, limited, hi);
}

ALLOY_HOST_DEVICE inline float exp_fp32(float x) {
  return exp_sum(x, 0.0f);
}

}  // namespace alloy
