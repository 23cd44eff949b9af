// lane_sum (core/ops/cpu/lane_sum.h): the documented order, exactly (its bits are the CPU bias
// gradients'), and the plain sum where every order gives the same result.
#include "core/ops/cpu/lane_sum.h"

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <vector>

using alloy::cpu::lane_sum;

BOOST_AUTO_TEST_SUITE(lane_sum_suite)

BOOST_AUTO_TEST_CASE(sums_integers_exactly_for_every_count) {
  for (std::int64_t count = 0; count <= 70; ++count) {
    std::vector<float> values(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i)
      values[static_cast<std::size_t>(i)] = static_cast<float>(i % 7) - 2.0f;
    float expected = 0.0f;
    for (const float value : values)
      expected += value;
    BOOST_TEST(lane_sum(values.data(), count) == expected, "count " << count);
  }
}

// 2^24 then 31 ones, then a tail of 3: summed serially every one is lost against 2^24 (its
// spacing there is 2); in lanes, 15 lanes add theirs up before meeting lane 0's 2^24.
BOOST_AUTO_TEST_CASE(adds_in_sixteen_lanes_then_pairwise_then_the_tail) {
  std::vector<float> values(35, 1.0f);
  values[0] = 0x1p24f;
  float lanes[16];
  for (int j = 0; j < 16; ++j)
    lanes[j] = values[static_cast<std::size_t>(j)] + values[static_cast<std::size_t>(j + 16)];
  for (int width = 8; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j)
      lanes[j] += lanes[j + width];
  }
  const float expected = ((lanes[0] + values[32]) + values[33]) + values[34];
  BOOST_TEST(lane_sum(values.data(), 35) == expected);
  BOOST_TEST(expected == 0x1p24f + 32.0f);  // 2^24 + 30, then the tail's ones: 31 rounds to 32
  float serial = 0.0f;
  for (const float value : values)
    serial += value;
  BOOST_TEST(serial == 0x1p24f);
}

BOOST_AUTO_TEST_SUITE_END()
