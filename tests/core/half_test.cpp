// The 16-bit conversions against an independent float64 model of IEEE rounding, over every
// 16-bit pattern and every rounding case around each of them; with the CUDA headers at hand,
// also bit for bit against CUDA's own host conversions.
#include "core/half.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/random.h"

#ifdef ALLOY_TEST_CUDA_HEADERS
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

using namespace alloy;

namespace {

// A 16-bit format: 1 sign bit, `exponent_bits`, `mantissa_bits`, IEEE semantics.
struct Format {
  const char* name;
  int exponent_bits;
  int mantissa_bits;

  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int min_exponent() const { return 1 - bias(); }  // of the smallest normal
  // 2^max_exponent * (2 - 2^-mantissa_bits) is the largest finite value.
  int max_exponent() const { return bias(); }
};

constexpr Format kHalf{"f16", 5, 10};
constexpr Format kBf16{"bf16", 8, 7};

// The value a bit pattern encodes, from the definition.
double decode(const Format& f, std::uint16_t bits) {
  const bool negative = (bits >> 15) != 0;
  const int exponent = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  double magnitude;
  if (exponent == (1 << f.exponent_bits) - 1) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(mantissa, f.min_exponent() - f.mantissa_bits);
  } else {
    magnitude =
        std::ldexp((1 << f.mantissa_bits) + mantissa, exponent - f.bias() - f.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// Round to nearest, ties to even, in float64: the value is scaled so that one unit in the
// last place of the target format is 1, rounded by nearbyint (whose default mode is
// round-half-even), and encoded from the definition. Overflow gives infinity, NaN the
// canonical 0x7fff.
std::uint16_t encode(const Format& f, float value) {
  if (std::isnan(value)) return 0x7fff;
  const std::uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  const std::uint16_t infinity =
      static_cast<std::uint16_t>(((1 << f.exponent_bits) - 1) << f.mantissa_bits);
  const double magnitude = std::fabs(static_cast<double>(value));
  if (std::isinf(magnitude)) return sign | infinity;
  if (magnitude == 0.0) return sign;
  int exponent;
  std::frexp(magnitude, &exponent);  // magnitude in [2^(exponent-1), 2^exponent)
  const int unit_exponent = std::max(exponent - 1, f.min_exponent()) - f.mantissa_bits;
  const double units = std::nearbyint(std::ldexp(magnitude, -unit_exponent));
  const double rounded = std::ldexp(units, unit_exponent);
  if (rounded >= std::ldexp(1.0, f.max_exponent() + 1)) return sign | infinity;
  if (rounded < std::ldexp(1.0, f.min_exponent())) {
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(units));  // subnormal
  }
  std::frexp(rounded, &exponent);
  const int biased = exponent - 1 + f.bias();
  const double fraction = std::ldexp(rounded, -(exponent - 1)) - 1.0;  // in [0, 1)
  const auto mantissa = static_cast<std::uint16_t>(std::ldexp(fraction, f.mantissa_bits));
  return static_cast<std::uint16_t>(sign | (biased << f.mantissa_bits) | mantissa);
}

std::uint16_t to_bits(const Format& f, float value) {
  return &f == &kHalf ? float_to_half_bits(value) : float_to_bf16_bits(value);
}

float from_bits(const Format& f, std::uint16_t bits) {
  return &f == &kHalf ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
}

#ifdef ALLOY_TEST_CUDA_HEADERS
std::uint16_t cuda_to_bits(const Format& f, float value) {
  if (&f == &kHalf) return static_cast<__half_raw>(__float2half_rn(value)).x;
  return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(value)).x;
}

float cuda_from_bits(const Format& f, std::uint16_t bits) {
  if (&f == &kHalf) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __bfloat162float(__nv_bfloat16(raw));
}
#endif

// Counts mismatches of float -> 16 bits over `inputs` and reports the first few.
void check_narrowing(const Format& f, const std::vector<float>& inputs, const char* what) {
  int bad = 0;
  for (const float value : inputs) {
    const std::uint16_t actual = to_bits(f, value);
    const std::uint16_t expected = encode(f, value);
    bool ok = actual == expected;
#ifdef ALLOY_TEST_CUDA_HEADERS
    const std::uint16_t cuda = cuda_to_bits(f, value);
    ok = ok && actual == cuda;
#else
    const std::uint16_t cuda = expected;
#endif
    if (!ok && ++bad <= 5) {
      BOOST_ERROR(f.name << " " << what << ": float bits 0x" << std::hex << float_bits(value)
                         << " gave 0x" << actual << ", reference 0x" << expected << ", CUDA 0x"
                         << cuda << std::dec);
    }
  }
  BOOST_TEST(bad == 0, f.name << " " << what << ": " << bad << " of " << inputs.size()
                              << " conversions wrong");
}

// Each finite 16-bit value's float, the midpoint to its upper neighbour (a tie) and the
// floats just either side of that midpoint, for both signs.
std::vector<float> rounding_cases(const Format& f) {
  std::vector<float> cases;
  const auto positive_infinity =
      static_cast<std::uint16_t>(((1 << f.exponent_bits) - 1) << f.mantissa_bits);
  for (std::uint16_t bits = 0; bits < positive_infinity; ++bits) {
    const double low = decode(f, bits);
    // The neighbour of the largest finite value is where infinity would be if the exponent
    // range went on: 2^(max_exponent + 1).
    const double high = bits + 1 == positive_infinity
                            ? std::ldexp(1.0, f.max_exponent() + 1)
                            : decode(f, static_cast<std::uint16_t>(bits + 1));
    const auto tie = static_cast<float>((low + high) / 2.0);  // exact: 12 significant bits
    for (const float value :
         {static_cast<float>(low), tie, std::nextafter(tie, 0.0f), std::nextafter(tie, INFINITY)}) {
      cases.push_back(value);
      cases.push_back(-value);
    }
  }
  return cases;
}

// Floats whose bits above the `dropped` low bits take every value, with the dropped bits at
// zero, just above zero, just below and at the half-way point, just above it, all ones, and
// one random pattern: every exponent, every kept mantissa, every rounding decision.
std::vector<float> sweep(int dropped, Generator& generator) {
  std::vector<float> cases;
  const std::uint32_t half_way = 1u << (dropped - 1);
  const std::uint32_t all = (1u << dropped) - 1;
  for (std::uint64_t high = 0; high < (std::uint64_t{1} << (32 - dropped)); ++high) {
    const auto base = static_cast<std::uint32_t>(high << dropped);
    const auto random = static_cast<std::uint32_t>(generator.next_u64()) & all;
    for (const std::uint32_t low : {0u, 1u, half_way - 1, half_way, half_way + 1, all, random}) {
      cases.push_back(bits_float(base | low));
    }
  }
  return cases;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(half_conversions)

BOOST_AUTO_TEST_CASE(the_reference_model_agrees_with_known_values) {
  // A few values from the IEEE 754 tables, so the model itself is not taken on trust.
  BOOST_TEST(encode(kHalf, 1.0f) == 0x3c00);
  BOOST_TEST(encode(kHalf, -2.0f) == 0xc000);
  BOOST_TEST(encode(kHalf, 65504.0f) == 0x7bff);
  BOOST_TEST(encode(kHalf, 65520.0f) == 0x7c00);  // the tie above the largest half overflows
  BOOST_TEST(encode(kHalf, 0x1.0p-24f) == 0x0001);
  BOOST_TEST(encode(kHalf, 0x1.0p-25f) == 0x0000);  // tie between 0 and 2^-24: even is 0
  BOOST_TEST(encode(kHalf, 0x1.8p-24f) == 0x0002);  // tie between 1 and 2 units: even is 2
  BOOST_TEST(encode(kHalf, 0x1.002p0f) == 0x3c00);  // tie: mantissa 0 is even
  BOOST_TEST(encode(kHalf, 0x1.006p0f) == 0x3c02);  // tie: mantissa 1 rounds up to 2
  BOOST_TEST(decode(kHalf, 0x7bff) == 65504.0);
  BOOST_TEST(decode(kHalf, 0x0400) == 0x1.0p-14);
  BOOST_TEST(decode(kHalf, 0x03ff) == 0x1.ff8p-15);
  BOOST_TEST(encode(kBf16, 1.0f) == 0x3f80);
  BOOST_TEST(encode(kBf16, 0x1.01p0f) == 0x3f80);  // tie to even
  BOOST_TEST(encode(kBf16, 0x1.03p0f) == 0x3f82);
  BOOST_TEST(encode(kBf16, std::numeric_limits<float>::max()) == 0x7f80);
  BOOST_TEST(decode(kBf16, 0x7f7f) == 0x1.fep127);
  BOOST_TEST(decode(kBf16, 0x0001) == 0x1.0p-133);
}

BOOST_AUTO_TEST_CASE(widening_is_exact_for_every_pattern) {
  for (const Format* f : {&kHalf, &kBf16}) {
    int bad = 0;
    for (std::uint32_t pattern = 0; pattern <= 0xffff; ++pattern) {
      const auto bits = static_cast<std::uint16_t>(pattern);
      const float actual = from_bits(*f, bits);
      const double expected = decode(*f, bits);
      // NaNs widen to NaNs: f16's to the canonical quiet NaN as CUDA does, bf16's keep their
      // payload and sign (widening bf16 is a shift).
      bool ok = std::isnan(expected)
                    ? std::isnan(actual) && (f != &kHalf || float_bits(actual) == 0x7fffffffu)
                    : static_cast<double>(actual) == expected &&
                          std::signbit(actual) == std::signbit(expected);
#ifdef ALLOY_TEST_CUDA_HEADERS
      ok = ok && float_bits(actual) == float_bits(cuda_from_bits(*f, bits));
#endif
      if (!ok && ++bad <= 5) {
        BOOST_ERROR(f->name << " 0x" << std::hex << pattern << std::dec << " widened to " << actual
                            << ", expected " << expected);
      }
      // Narrowing a widened value gives the pattern back (NaNs become the canonical one).
      const std::uint16_t back = to_bits(*f, actual);
      if (back != (std::isnan(expected) ? 0x7fff : bits) && ++bad <= 5) {
        BOOST_ERROR(f->name << " 0x" << std::hex << pattern << " round-trips to 0x" << back
                            << std::dec);
      }
    }
    BOOST_TEST(bad == 0, f->name << ": " << bad << " patterns wrong");
  }
}

BOOST_AUTO_TEST_CASE(narrowing_rounds_to_nearest_even_around_every_value) {
  check_narrowing(kHalf, rounding_cases(kHalf), "values, ties and their neighbours");
  check_narrowing(kBf16, rounding_cases(kBf16), "values, ties and their neighbours");
}

BOOST_AUTO_TEST_CASE(narrowing_sweeps_every_exponent_and_mantissa) {
  Generator generator(1);
  // f16 keeps 10 of float's 23 mantissa bits (13 dropped) for normals, fewer for subnormals,
  // whose ties lie elsewhere and are covered by rounding_cases.
  check_narrowing(kHalf, sweep(13, generator), "sweep");
  check_narrowing(kBf16, sweep(16, generator), "sweep");
}

BOOST_AUTO_TEST_CASE(special_values) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> specials = {0.0f,
                                       -0.0f,
                                       inf,
                                       -inf,
                                       nan,
                                       -nan,
                                       bits_float(0x7f800001u),  // signalling NaN
                                       bits_float(0xffc12345u),  // negative NaN with a payload
                                       std::numeric_limits<float>::max(),
                                       -std::numeric_limits<float>::max(),
                                       std::numeric_limits<float>::denorm_min(),
                                       -std::numeric_limits<float>::min(),
                                       65504.0f,
                                       65519.996f,
                                       65520.0f,
                                       -65520.0f,
                                       1e10f,
                                       0x1.0p-25f,
                                       0x1.000002p-25f,
                                       0x1.0p-26f};
  check_narrowing(kHalf, specials, "specials");
  check_narrowing(kBf16, specials, "specials");
  // The contract spelled out, independently of the reference model.
  BOOST_TEST(float_to_half_bits(nan) == 0x7fff);
  BOOST_TEST(float_to_half_bits(-nan) == 0x7fff);
  BOOST_TEST(float_to_bf16_bits(-nan) == 0x7fff);
  BOOST_TEST(float_to_half_bits(70000.0f) == 0x7c00);
  BOOST_TEST(float_to_half_bits(-70000.0f) == 0xfc00);
  BOOST_TEST(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);
  BOOST_TEST(float_to_half_bits(-1e-30f) == 0x8000);  // underflow keeps the sign
  BOOST_TEST(round_to_half(0.1f) == 0x1.998p-4f);
  BOOST_TEST(round_to_bf16(0.1f) == 0x1.9ap-4f);
}

BOOST_AUTO_TEST_SUITE_END()
