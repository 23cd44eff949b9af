#include "core/ops/dropout.h"

#include <algorithm>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"
#include "core/ops/cpu/philox_batch.h"

namespace alloy::cpu {

namespace {

// Columns per unit of work: 32 counters of 4 columns, one wide step of philox4x32_10_run.
constexpr std::int64_t kBlockColumns = 128;

// y[j] = x[j] * (bits[j] < threshold ? 0 : scale): a function of its own, which GCC vectorises
// (inside the loop over blocks it did not, and the random branch cost more than the bits).
void scale_kept(const float* x, float* y, const std::uint32_t* bits, std::int64_t count,
                std::uint32_t threshold, float scale) {
  for (std::int64_t j = 0; j < count; ++j)
    y[j] = x[j] * (bits[j] < threshold ? 0.0f : scale);
}

}  // namespace

void dropout(const void* in, void* out, DType dtype, std::int64_t rows, std::int64_t columns,
             const DropoutMask& mask, const std::int32_t* step) {
  if (rows == 0 || columns == 0) return;
  const auto step_word = static_cast<std::uint32_t>(step[0]);
  const auto k0 = static_cast<std::uint32_t>(mask.key);
  const auto k1 = static_cast<std::uint32_t>(mask.key >> 32);
  const std::int64_t blocks = (columns + kBlockColumns - 1) / kBlockColumns;
  // Units of one row's block each, so that both many short rows and a few long ones spread
  // over the pool. Every element's result depends on its position only: any split gives the
  // same bits.
  parallel_ranges(rows * blocks, kBlockColumns, [&](std::int64_t begin, std::int64_t end) {
    std::uint32_t bits[kBlockColumns];
    float in_scratch[kBlockColumns], out_scratch[kBlockColumns];
    for (std::int64_t unit = begin; unit < end; ++unit) {
      const std::int64_t row = unit / blocks;
      const std::int64_t first = (unit % blocks) * kBlockColumns;
      const std::int64_t count = std::min(kBlockColumns, columns - first);
      const auto g = static_cast<std::uint32_t>(mask.row_start + mask.row_stride * row);
      // Only the counters the block's columns need: rows of a few columns draw a few.
      philox4x32_10_run(static_cast<std::uint32_t>(first / 4), g, step_word, 0u, k0, k1,
                        (count + 3) / 4, bits);
      const std::int64_t offset = row * columns + first;
      const float* x = load_floats(in, dtype, offset, count, in_scratch);
      float* y = output_floats(out, dtype, offset, out_scratch);
      scale_kept(x, y, bits, count, mask.threshold, mask.scale);
      store_floats(y, out, dtype, offset, count);
    }
  });
}

}  // namespace alloy::cpu
