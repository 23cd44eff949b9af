// The CUDA kernels' fast 32-bit division by a launch-time divisor (core/ops/cuda/int_divider.h)
// against the / and % of the host, on the divisors and dividends where a round-up multiplier
// could go wrong: powers of two and their neighbours, the largest values, and random ones.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "core/ops/cuda/int_divider.h"

using alloy::cuda::IntDivider;

namespace {

std::vector<std::uint32_t> edge_values() {
  std::vector<std::uint32_t> values{0, 1, 2, 3, 5, 6, 7, 25, 100, 196, 784, 1000, 4704};
  for (int bit = 1; bit < 32; ++bit) {
    const std::uint32_t power = std::uint32_t{1} << bit;
    values.insert(values.end(), {power - 1, power, power + 1});
  }
  values.push_back(0xffffffffu);
  return values;
}

void check(const IntDivider& divider, std::uint32_t n) {
  const std::uint32_t d = divider.divisor();
  const IntDivider::QuotientRemainder qr = divider.divmod(n);
  if (qr.quotient != n / d || qr.remainder != n % d || divider.divide(n) != n / d) {
    BOOST_ERROR(n << " / " << d << ": got " << qr.quotient << " remainder " << qr.remainder
                  << ", expected " << n / d << " remainder " << n % d);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(int_divider)

BOOST_AUTO_TEST_CASE(matches_host_division_on_edges_and_random_values) {
  std::mt19937 random(7);
  std::vector<std::uint32_t> divisors;
  for (const std::uint32_t value : edge_values())
    if (value > 0) divisors.push_back(value);
  for (int i = 0; i < 200; ++i)
    divisors.push_back(random() % 0xffffffffu + 1);
  for (int i = 0; i < 200; ++i)
    divisors.push_back(random() % 5000 + 1);
  for (const std::uint32_t d : divisors) {
    const IntDivider divider(d);
    for (const std::uint32_t n : edge_values()) {
      check(divider, n);
      // Multiples of d and their neighbours, where the quotient steps.
      const std::uint64_t multiple = std::uint64_t{n / d} * d;
      for (std::uint64_t m : {multiple, multiple + d - 1, multiple + d})
        if (m <= 0xffffffffu) check(divider, static_cast<std::uint32_t>(m));
    }
    for (int i = 0; i < 2000; ++i)
      check(divider, static_cast<std::uint32_t>(random()));
  }
}

BOOST_AUTO_TEST_CASE(every_dividend_below_a_million_for_small_divisors) {
  for (std::uint32_t d = 1; d <= 64; ++d) {
    const IntDivider divider(d);
    for (std::uint32_t n = 0; n < 1000000; ++n)
      check(divider, n);
  }
}

BOOST_AUTO_TEST_CASE(zero_is_refused) {
  BOOST_CHECK_THROW(IntDivider(0), alloy::Error);
}

BOOST_AUTO_TEST_SUITE_END()
