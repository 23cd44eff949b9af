// The bulk conversions against core/half.h's scalar reference, element by element: all 65536
// 16-bit patterns widened, and narrowing of every boundary class (ties, subnormals, overflow,
// NaN payloads) plus a sweep of random floats, at lengths that exercise the vector tails.
#include "core/ops/cpu/convert.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "core/random.h"

using namespace alloy;

namespace {

std::vector<float> interesting_floats() {
  std::vector<float> values;
  // Every half pattern widened, and the midpoints between neighbours (round-to-even ties).
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float value = half_bits_to_float(static_cast<std::uint16_t>(h));
    values.push_back(value);
    values.push_back(bits_float(float_bits(value) + 0x1000u));  // f16's half-ulp above
    values.push_back(bits_float(float_bits(value) + 0x8000u));  // bf16's half-ulp above
    values.push_back(bits_float(float_bits(value) + 1u));
  }
  for (std::uint32_t bits : {0x7f800001u, 0xffc00001u, 0x7fbfffffu, 0x477ff000u, 0x477fefffu,
                             0x33000000u, 0x33000001u, 0x7f7fffffu, 0xff7fffffu, 0x00000001u}) {
    values.push_back(bits_float(bits));
  }
  Generator generator(99);
  for (int i = 0; i < 100000; ++i) {
    values.push_back(bits_float(static_cast<std::uint32_t>(generator.below(1ull << 32))));
  }
  return values;
}

void check_narrowing(DType dtype, std::uint16_t (*reference)(float)) {
  const std::vector<float> values = interesting_floats();
  std::vector<std::uint16_t> bits(values.size());
  cpu::narrow_16(values.data(), bits.data(), dtype, static_cast<std::int64_t>(values.size()));
  std::size_t mismatches = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (bits[i] != reference(values[i]) && mismatches++ == 0) first = i;
  }
  BOOST_TEST(mismatches == 0u, dtype_name(dtype) << ": " << mismatches << " mismatches, first "
                                                 << std::hex << float_bits(values[first]));
}

void check_widening(DType dtype, float (*reference)(std::uint16_t)) {
  std::vector<std::uint16_t> bits(0x10000u + 5);  // + a tail shorter than a vector
  for (std::size_t i = 0; i < bits.size(); ++i)
    bits[i] = static_cast<std::uint16_t>(i * 40503u);
  std::vector<float> values(bits.size());
  cpu::widen_16(bits.data(), dtype, values.data(), static_cast<std::int64_t>(bits.size()));
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < bits.size(); ++i) {
    mismatches += float_bits(values[i]) != float_bits(reference(bits[i]));
  }
  BOOST_TEST(mismatches == 0u, dtype_name(dtype) << ": " << mismatches << " mismatches");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(convert)

BOOST_AUTO_TEST_CASE(narrowing_matches_the_scalar_reference) {
  BOOST_TEST_MESSAGE("vector conversions: " << (cpu::vector_conversions() ? "on" : "off"));
  check_narrowing(DType::f16, float_to_half_bits);
  check_narrowing(DType::bf16, float_to_bf16_bits);
}

BOOST_AUTO_TEST_CASE(widening_matches_the_scalar_reference) {
  check_widening(DType::f16, half_bits_to_float);
  check_widening(DType::bf16, bf16_bits_to_float);
}

BOOST_AUTO_TEST_SUITE_END()
