// Stochastic rounding to fp16 and bf16 (core/stochastic_rounding.h): every result is one of the
// two representable neighbours of the value (never more than one ulp away), the lower one with
// random word 0 and the upper one with the largest word; the mean of many roundings of one value
// equals the value within its standard error (unbiased), in the normal range, among fp16's
// subnormals and past the largest finite value; representable values, zeros, infinities and
// NaN come out as round-to-nearest gives them; the words are the documented Philox ones.
#include "core/stochastic_rounding.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "core/random.h"

using namespace alloy;

namespace {

struct Format {
  const char* name;
  bool bf16;
  std::uint16_t round(float value, std::uint32_t random) const {
    return bf16 ? float_to_bf16_bits_stochastic(value, random)
                : float_to_half_bits_stochastic(value, random);
  }
  std::uint16_t nearest(float value) const {
    return bf16 ? float_to_bf16_bits(value) : float_to_half_bits(value);
  }
  float value(std::uint16_t bits) const {
    return bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
  }
  // The representable neighbours lower <= |x| <= upper of a finite x's magnitude, as bits
  // (equal when |x| is representable): from round-to-nearest, independent of the code under test.
  std::pair<std::uint16_t, std::uint16_t> neighbours(float x) const {
    const float magnitude = std::fabs(x);
    const std::uint16_t n = nearest(magnitude);
    if (value(n) == magnitude) return {n, n};
    if (value(n) < magnitude) return {n, static_cast<std::uint16_t>(n + 1)};
    return {static_cast<std::uint16_t>(n - 1), n};
  }
};

const Format kFormats[] = {{"fp16", false}, {"bf16", true}};

std::uint16_t with_sign(std::uint16_t magnitude, float x) {
  return std::signbit(x) ? static_cast<std::uint16_t>(magnitude | 0x8000u) : magnitude;
}

// Values over the format's whole range, subnormals and overflow included: random significands
// at exponents from below the smallest subnormal to past the largest finite value.
std::uint32_t word_of(Generator& generator) {
  return static_cast<std::uint32_t>(generator.next_u64() >> 32);
}

std::vector<float> spread(const Format& f, Generator& generator, int count) {
  std::vector<float> values;
  const int low = f.bf16 ? -133 : -26, high = f.bf16 ? 127 : 16;
  for (int i = 0; i < count; ++i) {
    const int exponent = low + static_cast<int>(generator.below(high - low + 1));
    const float significand = 1.0f + static_cast<float>(word_of(generator) >> 9) * 0x1p-23f;
    const float x = std::ldexp(significand, exponent);
    values.push_back(generator.below(2) ? -x : x);
  }
  return values;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(stochastic_rounding)

BOOST_AUTO_TEST_CASE(every_result_is_a_neighbour_of_the_value) {
  Generator generator(5);
  for (const Format& f : kFormats) {
    for (const float x : spread(f, generator, 20000)) {
      auto [lower, upper] = f.neighbours(x);
      // fp16's step past 65504 is to infinity at 65536: beyond that there is no lower value.
      if (!f.bf16 && std::fabs(x) >= 65536.0f) lower = upper;
      const std::uint16_t down = with_sign(lower, x), up = with_sign(upper, x);
      const std::uint32_t words[] = {0u, word_of(generator), word_of(generator), 0xffffffffu};
      for (const std::uint32_t word : words) {
        const std::uint16_t got = f.round(x, word);
        BOOST_TEST((got == down || got == up), f.name << ": " << x << " with word " << word
                                                      << " gave " << got << ", not its neighbour "
                                                      << down << " or " << up);
      }
      // Word 0 never carries; the largest word carries whenever a fraction was dropped.
      BOOST_TEST(f.round(x, 0u) == down, f.name << ": " << x);
      BOOST_TEST(f.round(x, 0xffffffffu) == up, f.name << ": " << x);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_mean_of_many_roundings_is_the_value) {
  const std::vector<std::pair<const Format*, std::vector<float>>> cases = {
      {&kFormats[0],
       {1.0f + 0.3f * 0x1p-10f, -(1.0f + 0.9f * 0x1p-10f), 1000.123f, 3.3e-7f /* subnormal */,
        -2.1e-8f /* below the smallest subnormal */, 65511.0f /* between 65504 and inf */, 0.1f}},
      {&kFormats[1], {1.0f + 0.3f * 0x1p-7f, -(1.0f + 0.9f * 0x1p-7f), 1000.123f, 0.1f, 1e-39f}}};
  constexpr int kDraws = 200000;
  for (const auto& [format, values] : cases) {
    const Format& f = *format;
    for (std::size_t v = 0; v < values.size(); ++v) {
      const float x = values[v];
      const auto [lower, upper] = f.neighbours(x);
      // Past the largest finite value the upper neighbour is infinity: count the fraction
      // rounded up instead of averaging.
      const double a = f.value(lower), b = std::isinf(f.value(upper)) ? 65536.0 : f.value(upper);
      const double p = (std::fabs(x) - a) / (b - a);
      BOOST_TEST_REQUIRE((p > 0.0 && p < 1.0), f.name << ": " << x << " is representable");
      double ups = 0.0;
      for (int e = 0; e < kDraws; ++e) {
        const std::uint32_t word = stochastic_rounding_word(
            0x123456789abcdefull, 7, static_cast<std::uint32_t>(v), static_cast<std::uint64_t>(e));
        ups += f.round(x, word) == with_sign(upper, x);
      }
      const double standard_error = std::sqrt(p * (1.0 - p) / kDraws);
      BOOST_TEST(std::fabs(ups / kDraws - p) < 5.0 * standard_error,
                 f.name << ": " << x << " rounded up " << ups / kDraws << " of the time, not " << p
                        << " (standard error " << standard_error << ")");
    }
  }
}

BOOST_AUTO_TEST_CASE(representable_values_zeros_infinities_and_nan_are_kept) {
  for (const Format& f : kFormats) {
    for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
      const float x = f.value(static_cast<std::uint16_t>(bits));
      if (std::isnan(x)) continue;
      for (const std::uint32_t word : {0u, 0x80000000u, 0xffffffffu}) {
        BOOST_TEST_REQUIRE(f.round(x, word) == bits, f.name << ": " << x << " word " << word);
      }
    }
    for (const std::uint32_t word : {0u, 0xffffffffu}) {
      BOOST_TEST(f.round(std::numeric_limits<float>::quiet_NaN(), word) == 0x7fffu);
      BOOST_TEST(f.round(-std::numeric_limits<float>::quiet_NaN(), word) == 0x7fffu);
      // A NaN whose payload lies only in the bits a truncation drops stays NaN.
      std::uint32_t low_payload = 0x7f800001u;
      float nan;
      std::memcpy(&nan, &low_payload, sizeof nan);
      BOOST_TEST(f.round(nan, word) == 0x7fffu);
    }
    BOOST_TEST(f.round(1e38f * 10.0f, 0u) == f.nearest(std::numeric_limits<float>::infinity()));
    BOOST_TEST(f.round(-std::numeric_limits<float>::infinity(), 0xffffffffu) ==
               f.nearest(-std::numeric_limits<float>::infinity()));
  }
  BOOST_TEST(float_to_half_bits_stochastic(1e6f, 0u) == 0x7c00u);  // past 65536: infinity
  BOOST_TEST(float_to_half_bits_stochastic(-1e-40f, 0xffffffffu) == 0x8000u);
}

BOOST_AUTO_TEST_CASE(the_words_are_philox_words_of_step_parameter_and_element) {
  const std::uint64_t key = 0x0123456789abcdefull;
  const Philox4x32 block =
      philox4x32_10({{2u, 9u, 31u, kStochasticRoundingDomain}}, 0x89abcdefu, 0x01234567u);
  for (std::uint32_t w = 0; w < 4; ++w)
    BOOST_TEST(stochastic_rounding_word(key, 31, 9, 8 + w) == block.v[w]);
  std::set<std::uint32_t> words;
  for (std::uint32_t step = 1; step <= 4; ++step) {
    for (std::uint32_t parameter = 0; parameter < 4; ++parameter)
      words.insert(stochastic_rounding_word(key, step, parameter, 5));
  }
  BOOST_TEST(words.size() == 16u);  // another step or parameter, other bits
}

BOOST_AUTO_TEST_SUITE_END()
