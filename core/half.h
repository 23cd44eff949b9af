// Host conversions between float and the 16-bit formats, bit-exact with CUDA's
// __float2half_rn / __half2float / __float2bfloat16_rn / __bfloat162float host paths:
// round to nearest even, overflow to infinity, every NaN to the canonical 0x7fff.
#pragma once

#include <cstdint>
#include <cstring>

namespace alloy {

inline std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float bits_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline std::uint16_t float_to_half_bits(float value) {
  const std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or NaN
    return magnitude == 0x7f800000u ? static_cast<std::uint16_t>(sign | 0x7c00u) : 0x7fffu;
  }
  if (magnitude >= 0x477ff000u) {  // rounds to a value past 65504
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (magnitude >= 0x38800000u) {  // normal half: drop 13 mantissa bits, round half to even
    const std::uint32_t rebased = magnitude - 0x38000000u;
    const std::uint32_t kept = rebased >> 13;
    const std::uint32_t rest = rebased & 0x1fffu;
    const std::uint32_t round_up = rest > 0x1000u || (rest == 0x1000u && (kept & 1u));
    return static_cast<std::uint16_t>(sign | (kept + round_up));
  }
  if (magnitude <= 0x33000000u) {  // at most half the smallest subnormal: rounds to zero
    return static_cast<std::uint16_t>(sign);
  }
  // Subnormal half: shift the full 24-bit significand into place.
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;  // in [14, 24]
  const std::uint32_t kept = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1u);
  const std::uint32_t round_up = rest > halfway || (rest == halfway && (kept & 1u));
  return static_cast<std::uint16_t>(sign | (kept + round_up));
}

inline float half_bits_to_float(std::uint16_t half) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(half) & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1fu) {
    return mantissa ? bits_float(0x7fffffffu) : bits_float(sign | 0x7f800000u);
  }
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    std::uint32_t float_exponent = 113;  // 2^-14 before normalising
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --float_exponent;
    }
    return bits_float(sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13));
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline std::uint16_t float_to_bf16_bits(float value) {
  const std::uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

inline float bf16_bits_to_float(std::uint16_t value) {
  return bits_float(static_cast<std::uint32_t>(value) << 16);
}

// Rounds a float to the nearest value representable in the format.
inline float round_to_half(float value) {
  return half_bits_to_float(float_to_half_bits(value));
}
inline float round_to_bf16(float value) {
  return bf16_bits_to_float(float_to_bf16_bits(value));
}

}  // namespace alloy
