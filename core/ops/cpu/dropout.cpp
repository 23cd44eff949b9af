#include "core/ops/dropout.h"

#include <algorithm>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Counters computed side by side: the rounds run lane by lane over plain arrays, which the
// compiler turns into vector multiplies (16 lanes = two AVX-512 or four AVX2 registers a word).
constexpr int kLanes = 16;
// Columns one unit of work covers: each counter gives 4 columns.
constexpr std::int64_t kBlockColumns = 4 * kLanes;

// factor[j] = scale where column 4 * group + j is kept, 0 where dropped, for kBlockColumns
// columns from group `group` of global row g.
void block_factors(const DropoutMask& mask, std::uint32_t step, std::uint32_t g,
                   std::uint32_t group, float* factor) {
  std::uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int lane = 0; lane < kLanes; ++lane) {
    c0[lane] = group + static_cast<std::uint32_t>(lane);
    c1[lane] = g;
    c2[lane] = step;
    c3[lane] = 0;
  }
  // philox4x32_10's schedule, written out so that each round is one loop over the lanes.
  std::uint32_t k0 = static_cast<std::uint32_t>(mask.key);
  std::uint32_t k1 = static_cast<std::uint32_t>(mask.key >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    for (int lane = 0; lane < kLanes; ++lane)
      philox_round(c0[lane], c1[lane], c2[lane], c3[lane], k0, k1);
  }
  for (int lane = 0; lane < kLanes; ++lane) {
    factor[4 * lane + 0] = c0[lane] < mask.threshold ? 0.0f : mask.scale;
    factor[4 * lane + 1] = c1[lane] < mask.threshold ? 0.0f : mask.scale;
    factor[4 * lane + 2] = c2[lane] < mask.threshold ? 0.0f : mask.scale;
    factor[4 * lane + 3] = c3[lane] < mask.threshold ? 0.0f : mask.scale;
  }
}

}  // namespace

void dropout(const void* in, void* out, DType dtype, std::int64_t rows, std::int64_t columns,
             const DropoutMask& mask, const std::int32_t* step) {
  if (rows == 0 || columns == 0) return;
  const auto step_word = static_cast<std::uint32_t>(step[0]);
  const std::int64_t blocks = (columns + kBlockColumns - 1) / kBlockColumns;
  // Units of one row's block each, so that both many short rows and a few long ones spread
  // over the pool. Every element's result depends on its position only: any split gives the
  // same bits.
  parallel_ranges(rows * blocks, kBlockColumns, [&](std::int64_t begin, std::int64_t end) {
    float factor[kBlockColumns], in_scratch[kBlockColumns], out_scratch[kBlockColumns];
    for (std::int64_t unit = begin; unit < end; ++unit) {
      const std::int64_t row = unit / blocks;
      const std::int64_t first = (unit % blocks) * kBlockColumns;
      const std::int64_t count = std::min(kBlockColumns, columns - first);
      const auto g = static_cast<std::uint32_t>(mask.row_start + mask.row_stride * row);
      block_factors(mask, step_word, g, static_cast<std::uint32_t>(first / 4), factor);
      const std::int64_t offset = row * columns + first;
      const float* x = load_floats(in, dtype, offset, count, in_scratch);
      float* y = output_floats(out, dtype, offset, out_scratch);
      for (std::int64_t j = 0; j < count; ++j)
        y[j] = x[j] * factor[j];
      store_floats(y, out, dtype, offset, count);
    }
  });
}

}  // namespace alloy::cpu
