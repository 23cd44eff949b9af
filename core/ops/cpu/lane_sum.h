// A sum of floats in a fixed order that vectorises. A serial sum waits out each addition's
// latency (about 3 cycles): LeNet's bias gradients, 2.6 million values a step summed that way,
// were a fifth of the CPU convolution's backward outside its GEMMs.
#pragma once

#include <cstdint>

namespace alloy::cpu {

// values[0] + ... + values[count - 1] as 16 running sums (sum j takes values j, j + 16, j + 32,
// ...), added pairwise (j and j + 8, then j and j + 4, ...), then the last count % 16 values in
// order: the same order, so the same bits, on every machine and for every thread count.
inline float lane_sum(const float* values, std::int64_t count) {
  constexpr int kLanes = 16;
  float lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int j = 0; j < kLanes; ++j)
      lanes[j] += values[i + j];
  }
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j)
      lanes[j] += lanes[j + width];
  }
  float sum = lanes[0];
  for (; i < count; ++i)
    sum += values[i];
  return sum;
}

}  // namespace alloy::cpu
