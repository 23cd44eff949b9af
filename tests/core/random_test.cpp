#include "core/random.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace alloy;

namespace {

std::vector<std::uint64_t> draws(Generator& generator, int count) {
  std::vector<std::uint64_t> values;
  for (int i = 0; i < count; ++i)
    values.push_back(generator.next_u64());
  return values;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(random_generator)

BOOST_AUTO_TEST_CASE(matches_the_published_algorithm) {
  // splitmix64 seeding and xoshiro256** written out independently from Vigna's reference code
  // (prng.di.unimi.it): the stream must not change, or checkpoints would resume differently.
  std::uint64_t s[4];
  std::uint64_t x = 12345;
  for (auto& word : s) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    word = z ^ (z >> 31);
  }
  const auto rotl = [](std::uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  Generator generator(12345);
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t expected = rotl(s[1] * 5, 7) * 9;
    const std::uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    BOOST_TEST_REQUIRE(generator.next_u64() == expected, "draw " << i);
  }
}

BOOST_AUTO_TEST_CASE(same_seed_same_stream_other_seed_other_stream) {
  Generator a(7), b(7), c(8);
  const auto first = draws(a, 100);
  BOOST_TEST(first == draws(b, 100));
  BOOST_TEST(first != draws(c, 100));
  a.reseed(7);
  BOOST_TEST(first == draws(a, 100));
}

BOOST_AUTO_TEST_CASE(saved_state_restores_the_stream) {
  Generator generator(42);
  draws(generator, 17);
  generator.normal();  // any mix of calls: the state is all there is
  generator.below(10);
  const auto saved = generator.state();
  const auto expected = draws(generator, 50);
  const double expected_uniform = generator.uniform();

  Generator restored(999);
  restored.set_state(saved);
  BOOST_TEST(draws(restored, 50) == expected);
  BOOST_TEST(restored.uniform() == expected_uniform);
  BOOST_TEST(restored.state() == generator.state());
}

BOOST_AUTO_TEST_CASE(uniform_below_and_normal_have_their_ranges_and_moments) {
  Generator generator(3);
  constexpr int kCount = 200000;
  double sum = 0.0, normal_sum = 0.0, normal_squares = 0.0;
  std::vector<int> buckets(7, 0);
  for (int i = 0; i < kCount; ++i) {
    const double u = generator.uniform();
    BOOST_TEST_REQUIRE((u >= 0.0 && u < 1.0));
    sum += u;
    const std::uint64_t k = generator.below(7);
    BOOST_TEST_REQUIRE(k < 7u);
    ++buckets[k];
    const double z = generator.normal();
    BOOST_TEST_REQUIRE(std::isfinite(z));
    normal_sum += z;
    normal_squares += z * z;
  }
  // Five standard errors: a broken generator misses by far more.
  BOOST_TEST(std::fabs(sum / kCount - 0.5) < 5.0 * std::sqrt(1.0 / 12.0 / kCount));
  BOOST_TEST(std::fabs(normal_sum / kCount) < 5.0 / std::sqrt(kCount));
  BOOST_TEST(std::fabs(normal_squares / kCount - 1.0) < 5.0 * std::sqrt(2.0 / kCount));
  for (const int bucket : buckets) {
    BOOST_TEST(std::fabs(bucket - kCount / 7.0) < 5.0 * std::sqrt(kCount / 7.0));
  }
  BOOST_TEST(generator.below(1) == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
