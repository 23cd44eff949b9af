// rows_to_lanes and lanes_to_rows (core/ops/cpu/lane_transpose.h), in whichever build this is
// (AVX-512's register transposes or the scalar loops): every element where the layout says, the
// unused lanes zero, elements outside the rows untouched, half dtypes widened and rounded once.
#include "core/ops/cpu/lane_transpose.h"

#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <vector>

#include "core/ops/cpu/element_access.h"

using namespace alloy;
using alloy::cpu::kLaneCount;

namespace {

// A distinct value per element, exact in every dtype: small integers and halves.
float value_at(std::int64_t i) {
  return static_cast<float>(i % 251) * 0.5f - 60.0f;
}

std::vector<std::uint8_t> storage(DType dtype, std::int64_t elements) {
  return std::vector<std::uint8_t>(static_cast<std::size_t>(elements) * dtype_size(dtype));
}

// Runs laid out as one row of vectors ({0, 0}: as wide as the run), and as rows of 3 or 7
// vectors inside rows of 5 or 9 (a plane inside its padding), whose vectors between the rows are
// not written.
const cpu::LaneRows kLayouts[] = {{0, 0}, {3, 5}, {7, 9}};

cpu::LaneRows layout_for(cpu::LaneRows layout, std::int64_t length) {
  return layout.width == 0 ? cpu::LaneRows{length, length} : layout;
}

std::int64_t vector_of(cpu::LaneRows layout, std::int64_t i) {
  return (i / layout.width) * layout.stride + i % layout.width;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lane_transpose)

BOOST_AUTO_TEST_CASE(rows_go_into_lanes_and_unused_lanes_are_zero) {
  constexpr std::int64_t kElements = 4096;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    std::vector<std::uint8_t> data = storage(dtype, kElements);
    for (std::int64_t i = 0; i < kElements; ++i)
      cpu::store_element(data.data(), dtype, i, value_at(i));
    for (const cpu::LaneRows shape : kLayouts) {
      for (const int count : {16, 11, 1}) {
        for (const std::int64_t length : {1, 4, 13, 16, 17, 37}) {
          const cpu::LaneRows layout = layout_for(shape, length);
          std::int64_t offsets[kLaneCount] = {};
          for (int n = 0; n < count; ++n)
            offsets[n] = (n * 97 + 5) % (kElements - length);  // out of order, overlapping
          const std::int64_t vectors = vector_of(layout, length - 1) + 1;
          std::vector<float> lanes(static_cast<std::size_t>(vectors * kLaneCount), -1.0f);
          cpu::rows_to_lanes(data.data(), dtype, offsets, count, length, lanes.data(), layout);
          std::vector<bool> written(static_cast<std::size_t>(vectors), false);
          for (std::int64_t i = 0; i < length; ++i) {
            const std::int64_t vector = vector_of(layout, i);
            written[static_cast<std::size_t>(vector)] = true;
            for (int n = 0; n < kLaneCount; ++n) {
              const float expected = n < count ? value_at(offsets[n] + i) : 0.0f;
              BOOST_TEST(lanes[static_cast<std::size_t>(vector * kLaneCount + n)] == expected,
                         dtype_name(dtype)
                             << " rows of " << layout.width << " count " << count << " length "
                             << length << " element " << i << " lane " << n);
            }
          }
          for (std::int64_t vector = 0; vector < vectors; ++vector) {
            if (written[static_cast<std::size_t>(vector)]) continue;
            BOOST_TEST(lanes[static_cast<std::size_t>(vector * kLaneCount)] == -1.0f,
                       "vector " << vector << " between the rows was written");
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(lanes_go_back_into_rows_rounded_once_and_nothing_else_is_written) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const cpu::LaneRows shape : kLayouts) {
      for (const int count : {16, 7}) {
        for (const std::int64_t length : {1, 5, 16, 29}) {
          const cpu::LaneRows layout = layout_for(shape, length);
          // Rows `length` apart with a gap of 3 elements between them, which must keep their
          // sentinel.
          const std::int64_t stride = length + 3, elements = kLaneCount * stride;
          std::vector<std::uint8_t> data = storage(dtype, elements);
          for (std::int64_t i = 0; i < elements; ++i)
            cpu::store_element(data.data(), dtype, i, -7.5f);
          std::int64_t offsets[kLaneCount] = {};
          for (int n = 0; n < count; ++n)
            offsets[n] = ((n * 5) % kLaneCount) * stride;  // rows in a scrambled order
          const std::int64_t vectors = vector_of(layout, length - 1) + 1;
          std::vector<float> lanes(static_cast<std::size_t>(vectors * kLaneCount));
          for (std::size_t j = 0; j < lanes.size(); ++j)
            lanes[j] = static_cast<float>(j) * 1.001f;  // not exact in half dtypes: rounded
          cpu::lanes_to_rows(lanes.data(), layout, count, length, data.data(), dtype, offsets);
          std::vector<bool> written(static_cast<std::size_t>(elements), false);
          for (int n = 0; n < count; ++n) {
            for (std::int64_t i = 0; i < length; ++i) {
              const std::int64_t at = offsets[n] + i;
              written[static_cast<std::size_t>(at)] = true;
              std::vector<std::uint8_t> one = storage(dtype, 1);
              const float value =
                  lanes[static_cast<std::size_t>(vector_of(layout, i) * kLaneCount + n)];
              cpu::store_element(one.data(), dtype, 0, value);
              BOOST_TEST(cpu::load_element(data.data(), dtype, at) ==
                             cpu::load_element(one.data(), dtype, 0),
                         dtype_name(dtype)
                             << " rows of " << layout.width << " count " << count << " length "
                             << length << " row " << n << " element " << i);
            }
          }
          for (std::int64_t at = 0; at < elements; ++at) {
            if (written[static_cast<std::size_t>(at)]) continue;
            BOOST_TEST(cpu::load_element(data.data(), dtype, at) == -7.5f,
                       dtype_name(dtype) << " element " << at << " outside the rows was written");
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
