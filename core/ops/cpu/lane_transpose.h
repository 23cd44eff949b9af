// Rows of up to 16 images moved into and out of vector lanes, as the images-in-lanes Winograd
// kernels (conv2d_winograd_lanes.h) lay them out: lanes[i * 16 + n] is element i of image n's
// row. One float at a time, each store touched its own 64-byte line 16 times; 16 x 16 blocks
// transposed in AVX-512 registers write whole lines (a scalar loop where the build has no
// AVX-512). Pure moves and one rounding to the storage dtype: the bits are those of the loops.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace alloy::cpu {

constexpr int kLaneCount = 16;

// Where element i of an image's run sits in the lanes: vector ((i / width) * stride + i % width),
// that is rows of `width` vectors `stride` vectors apart (a plane's rows inside a padded plane),
// or consecutive vectors where width is the run's length and stride equals it.
struct LaneRows {
  std::int64_t width, stride;
};

// lanes[vector of element i][n] = element offsets[n] + i of `data` (dtype), widened, for n < count
// and i < length; lanes n >= count are zero.
void rows_to_lanes(const void* data, DType dtype, const std::int64_t (&offsets)[kLaneCount],
                   int count, std::int64_t length, float* lanes, LaneRows layout);

// Element offsets[n] + i of `data` (dtype) = lanes[vector of element i][n], rounded once to
// dtype, for n < count and i < length.
void lanes_to_rows(const float* lanes, LaneRows layout, int count, std::int64_t length, void* data,
                   DType dtype, const std::int64_t (&offsets)[kLaneCount]);

}  // namespace alloy::cpu
