// float_math.h's exp against float64 std::exp, its limits, and float_select.
#include "core/float_math.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

using namespace alloy;

namespace {
const double kHalfUlp = std::ldexp(1.0, -24);
const double kSmallestSubnormal = std::ldexp(1.0, -149);
const double kSmallestNormal = std::ldexp(1.0, -126);
}  // namespace

BOOST_AUTO_TEST_SUITE(float_math)

BOOST_AUTO_TEST_CASE(exp_is_within_an_ulp_over_its_range) {
  // Normal results: within 2 half-ulps relative (1.4 measured); subnormal ones within one
  // subnormal absolute (the final rounding plus e's own ulp, scaled down).
  int checked = 0;
  for (float x = -103.9f; x < 88.72f; x += 1.3e-3f) {
    const double expected = std::exp(static_cast<double>(x));
    const double got = exp_fp32(x);
    if (expected >= kSmallestNormal) {
      BOOST_TEST(std::fabs(got - expected) <= 2.0 * kHalfUlp * expected, "exp(" << x << ")");
    } else {
      BOOST_TEST(std::fabs(got - expected) <= kSmallestSubnormal, "exp(" << x << ")");
    }
    ++checked;
  }
  BOOST_TEST(checked > 100000);
}

BOOST_AUTO_TEST_CASE(exp_limits) {
  const float inf = std::numeric_limits<float>::infinity();
  BOOST_TEST(exp_fp32(0.0f) == 1.0f);
  BOOST_TEST(exp_fp32(-0.0f) == 1.0f);
  BOOST_TEST(exp_fp32(-inf) == 0.0f);
  BOOST_TEST(exp_fp32(inf) == inf);
  BOOST_TEST(std::isnan(exp_fp32(std::numeric_limits<float>::quiet_NaN())));
  BOOST_TEST(exp_fp32(88.8f) == inf);  // past the largest float
  BOOST_TEST(exp_fp32(1e30f) == inf);
  BOOST_TEST(exp_fp32(-104.0f) == 0.0f);  // below half the smallest subnormal
  BOOST_TEST(exp_fp32(-1e30f) == 0.0f);
  BOOST_TEST(exp_fp32(-103.0f) > 0.0f);  // a subnormal
}

BOOST_AUTO_TEST_CASE(exp_sum_keeps_the_low_part) {
  // exp(-x^2 / 2) with -x^2 / 2 as an exact pair: relative accuracy independent of x, where
  // rounding x^2 first would cost x^2 / 2 half-ulps (25 at x = 7).
  for (float x = 0.5f; x < 13.0f; x += 0.0137f) {
    const float square = x * x;
    const float hi = -0.5f * square;
    const float lo = -0.5f * std::fma(x, x, -square);
    const double expected = std::exp(-0.5 * static_cast<double>(x) * x);
    const double got = exp_sum(hi, lo);
    const double allowed =
        expected >= kSmallestNormal ? 2.0 * kHalfUlp * expected : kSmallestSubnormal;
    BOOST_TEST(std::fabs(got - expected) <= allowed, "exp(-x^2 / 2) at x = " << x);
  }
  // The limits follow hi: an infinite hi with any finite lo.
  BOOST_TEST(exp_sum(-std::numeric_limits<float>::infinity(), 3.0f) == 0.0f);
  BOOST_TEST(std::isnan(exp_sum(std::numeric_limits<float>::quiet_NaN(), 0.0f)));
}

BOOST_AUTO_TEST_CASE(float_select_picks_a_side_bit_for_bit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(float_select(true, 1.5f, 2.5f) == 1.5f);
  BOOST_TEST(float_select(false, 1.5f, 2.5f) == 2.5f);
  BOOST_TEST(std::signbit(float_select(true, -0.0f, 0.0f)));
  BOOST_TEST(!std::signbit(float_select(false, -0.0f, 0.0f)));
  BOOST_TEST(std::isnan(float_select(true, nan, 1.0f)));
  BOOST_TEST(float_select(false, nan, 1.0f) == 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
