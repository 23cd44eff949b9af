// philox4x32_10_run against philox4x32_10 (core/philox.h, itself checked against Random123's
// known answers) one counter at a time, on every instruction set this CPU has.
#include "core/ops/cpu/philox_batch.h"

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

using namespace alloy;
using namespace alloy::cpu;

namespace {

const PhiloxIsa kIsas[] = {PhiloxIsa::scalar, PhiloxIsa::avx2, PhiloxIsa::avx512};

const char* isa_name(PhiloxIsa isa) {
  return isa == PhiloxIsa::scalar ? "scalar" : (isa == PhiloxIsa::avx2 ? "avx2" : "avx512");
}

constexpr std::uint32_t kSentinel = 0xDEADBEEFu;

}  // namespace

BOOST_AUTO_TEST_SUITE(philox_batch)

// Counts around the vectors (4 and 8 counters) and wide steps (16 and 32): partial last vectors,
// whole steps followed by single vectors, and none at all. First counters near 2^32 wrap.
BOOST_AUTO_TEST_CASE(every_isa_gives_the_scalar_words_and_writes_nothing_past_the_run) {
  const std::uint32_t firsts[] = {0u, 13u, 0xFFFFFFF5u};
  const std::uint32_t keys[][2] = {
      {0u, 0u}, {0x9E3779B9u, 0xFFFFFFFFu}, {0x12345678u, 0xA4093822u}};
  int tested = 0;
  for (const PhiloxIsa isa : kIsas) {
    if (!philox_isa_supported(isa)) continue;
    ++tested;
    for (const std::uint32_t first : firsts) {
      for (const auto& key : keys) {
        for (std::int64_t count = 0; count <= 75; ++count) {
          std::vector<std::uint32_t> words(static_cast<std::size_t>(4 * count + 8), kSentinel);
          philox4x32_10_run(first, 7u, 0xFFFFFFFEu, 3u, key[0], key[1], count, words.data(), isa);
          int wrong = 0;
          for (std::int64_t i = 0; i < count; ++i) {
            const Philox4x32 expected = philox4x32_10(
                {{first + static_cast<std::uint32_t>(i), 7u, 0xFFFFFFFEu, 3u}}, key[0], key[1]);
            for (int w = 0; w < 4; ++w)
              wrong += words[static_cast<std::size_t>(4 * i + w)] != expected.v[w];
          }
          for (std::size_t j = static_cast<std::size_t>(4 * count); j < words.size(); ++j)
            wrong += words[j] != kSentinel;
          BOOST_TEST(wrong == 0, isa_name(isa) << " first " << first << " count " << count
                                               << " key " << key[0] << "," << key[1]);
        }
      }
    }
  }
  BOOST_TEST_MESSAGE("instruction sets tested: " << tested);
  BOOST_TEST(philox_isa_supported(philox_best_isa()));
}

BOOST_AUTO_TEST_CASE(an_isa_the_cpu_lacks_is_an_error) {
  for (const PhiloxIsa isa : kIsas) {
    if (philox_isa_supported(isa)) continue;
    std::uint32_t words[4];
    BOOST_CHECK_EXCEPTION(
        philox4x32_10_run(0, 0, 0, 0, 0, 0, 1, words, isa), Error, [](const Error& e) {
          return std::string(e.what()).find("this CPU has no") != std::string::npos;
        });
  }
}

BOOST_AUTO_TEST_SUITE_END()
