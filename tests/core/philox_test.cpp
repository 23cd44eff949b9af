#include "core/philox.h"

#include <boost/test/unit_test.hpp>
#include <cstdint>

using namespace alloy;

namespace {

struct KnownAnswer {
  Philox4x32 counter;
  std::uint32_t k0, k1;
  Philox4x32 expected;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(philox)

// Random123's tests/kat_vectors, the three "philox4x32 10" lines (counter, key, result); the
// same lines are quoted verbatim by several independent implementations.
BOOST_AUTO_TEST_CASE(matches_random123_known_answers) {
  const KnownAnswer answers[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       0xffffffffu,
       0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       0xa4093822u,
       0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const KnownAnswer& answer : answers) {
    const Philox4x32 result = philox4x32_10(answer.counter, answer.k0, answer.k1);
    for (int i = 0; i < 4; ++i)
      BOOST_TEST(result.v[i] == answer.expected.v[i],
                 "word " << i << " of counter " << std::hex << answer.counter.v[0]);
  }
}

// A one-bit change of the counter or the key changes about half of the output bits.
BOOST_AUTO_TEST_CASE(a_one_bit_change_scrambles_the_output) {
  const Philox4x32 base = philox4x32_10({{1, 2, 3, 4}}, 5, 6);
  const auto flipped_bits = [&](const Philox4x32& other) {
    int count = 0;
    for (int i = 0; i < 4; ++i)
      count += __builtin_popcount(base.v[i] ^ other.v[i]);
    return count;
  };
  for (int word = 0; word < 4; ++word) {
    Philox4x32 counter{{1, 2, 3, 4}};
    counter.v[word] ^= 1u;
    const int flipped = flipped_bits(philox4x32_10(counter, 5, 6));
    BOOST_TEST((flipped > 40 && flipped < 88), "counter word " << word << ": " << flipped);
  }
  BOOST_TEST((flipped_bits(philox4x32_10({{1, 2, 3, 4}}, 4, 6)) > 40));
  BOOST_TEST((flipped_bits(philox4x32_10({{1, 2, 3, 4}}, 5, 7)) > 40));
}

BOOST_AUTO_TEST_SUITE_END()
