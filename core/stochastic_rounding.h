// Stochastic rounding of fp32 values to fp16 and bf16 (--stochastic-rounding): a value between
// two neighbouring representable values a < x < b rounds to b with probability (x - a) / (b - a)
// and to a otherwise, so the rounding is unbiased in expectation (E[round(x)] = x) and never
// more than one ulp away. Updates too small for round-to-nearest (a half weight that a small
// learning rate times its gradient cannot move by half an ulp) still move the weight on
// average, which is what lets pure-half training (O3 without fp32 masters) keep learning.
//
// The rounding adds 32 uniform random bits below the kept bits and truncates: with f the
// dropped fraction of an ulp (as a real in [0, 1)) and r the random word, the magnitude rounds
// up iff f * 2^32 + r >= 2^32 (f * 2^32 rounded up where it is not an integer, below fp16's
// subnormals), so P(up) = f to within 2^-32. The sign is kept. Overflow: a magnitude past the
// largest finite value rounds to it or to infinity with the same rule (infinity as the next
// step); infinities stay infinite; every NaN becomes the canonical NaN 0x7fff, as
// core/half.h's round-to-nearest gives. Subnormals round on their own (uniform) spacing.
//
// The random word of element e of parameter p at optimizer step t (the step count including the
// update) is word e % 4 of philox4x32_10(counter (e / 4, p, t, kStochasticRoundingDomain), key)
// (core/philox.h), key = the run's seed: a pure function of where the element is, computed
// alike by the CPU and CUDA kernels, so both round every element the same way, and a resumed
// run (same seed, same step count) continues with the same bits.
#pragma once

#include <cstdint>

#include "core/float_bits.h"
#include "core/host_device.h"
#include "core/philox.h"

namespace alloy {

// The counter's last word: keeps these words apart from other users of a key (dropout uses 0).
inline constexpr std::uint32_t kStochasticRoundingDomain = 0x53520001u;

namespace stochastic_rounding_detail {

// Whether a dropped fraction `scaled` (f * 2^32, as an integer) plus `random` carries.
ALLOY_HOST_DEVICE inline std::uint32_t carries(std::uint64_t scaled, std::uint32_t random) {
  return scaled + random >= (std::uint64_t{1} << 32) ? 1u : 0u;
}

}  // namespace stochastic_rounding_detail

// The random word of an element (see above).
ALLOY_HOST_DEVICE inline std::uint32_t stochastic_rounding_word(std::uint64_t key,
                                                                std::uint32_t step,
                                                                std::uint32_t parameter,
                                                                std::uint64_t element) {
  const Philox4x32 words = philox4x32_10(
      {{static_cast<std::uint32_t>(element >> 2), parameter, step, kStochasticRoundingDomain}},
      static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
  return words.v[element & 3u];
}

// fp32 -> IEEE binary16 bits, rounded stochastically with the random word `random`.
ALLOY_HOST_DEVICE inline std::uint16_t float_to_half_bits_stochastic(float value,
                                                                     std::uint32_t random) {
  using stochastic_rounding_detail::carries;
  const std::uint32_t bits = bits_of(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0x7fffu;  // NaN
  const std::int32_t exponent = static_cast<std::int32_t>(magnitude >> 23) - 127;
  // Past 2^16 every value is beyond the largest finite half (65504): infinity. fp32 zeros and
  // subnormals (below 2^-126) are below 2^-32 of fp16's smallest subnormal: zero.
  if (exponent >= 16) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x00800000u) return static_cast<std::uint16_t>(sign);
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;  // 24 bits
  // Bits of the significand below the half's spacing: 13 for normal halves (exponent >= -14),
  // more for subnormal ones (spacing 2^-24).
  const std::int32_t dropped = exponent >= -14 ? 13 : -1 - exponent;
  std::uint32_t kept = 0;
  std::uint64_t scaled = 0;  // the dropped fraction times 2^32, rounded up
  if (dropped < 32) {
    kept = significand >> dropped;
    scaled = static_cast<std::uint64_t>(significand & ((1u << dropped) - 1u)) << (32 - dropped);
  } else if (dropped < 56) {
    const std::uint32_t below = static_cast<std::uint32_t>(dropped - 32);
    scaled = (static_cast<std::uint64_t>(significand) + (std::uint64_t{1} << below) - 1u) >> below;
  }  // else below 2^-32 of the smallest subnormal: zero.
  // Normal halves: the exponent field above the significand's implicit bit (a carry out of the
  // significand moves into the exponent, up to 0x7c00: infinity); subnormals: kept alone.
  const std::uint32_t base = exponent >= -14 ? static_cast<std::uint32_t>(exponent + 14) << 10 : 0u;
  return static_cast<std::uint16_t>(sign | (base + kept + carries(scaled, random)));
}

// fp32 -> bfloat16 bits, rounded stochastically with the random word `random`. bf16 keeps
// fp32's exponent, so its spacing is always 2^16 fp32 steps (subnormals included).
ALLOY_HOST_DEVICE inline std::uint16_t float_to_bf16_bits_stochastic(float value,
                                                                     std::uint32_t random) {
  const std::uint32_t bits = bits_of(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0x7fffu;  // NaN
  if (magnitude == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7f80u);
  const std::uint64_t scaled = static_cast<std::uint64_t>(magnitude & 0xffffu) << 16;
  // A carry out of the largest finite value gives 0x7f80: infinity.
  return static_cast<std::uint16_t>(
      sign | ((magnitude >> 16) + stochastic_rounding_detail::carries(scaled, random)));
}

}  // namespace alloy
