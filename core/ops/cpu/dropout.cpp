#include "core/ops/dropout.h"

#include <algorithm>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Counters per unit of work; each gives 4 columns.
constexpr int kCounters = 16;
constexpr std::int64_t kBlockColumns = 4 * kCounters;

// bits[j]: the random word of column 4 * group + j of global row g, for kBlockColumns columns.
// One philox4x32_10 call per counter, kept in registers: measured faster with GCC 12 than the
// rounds run as loops over arrays of counters, which it either leaves scalar with stack traffic
// or vectorises with 64-bit multiplies (it has no vector form of the 32-bit high product).
void block_bits(const DropoutMask& mask, std::uint32_t step, std::uint32_t g, std::uint32_t group,
                std::uint32_t* bits) {
  const auto k0 = static_cast<std::uint32_t>(mask.key);
  const auto k1 = static_cast<std::uint32_t>(mask.key >> 32);
  for (int i = 0; i < kCounters; ++i) {
    const Philox4x32 words =
        philox4x32_10({{group + static_cast<std::uint32_t>(i), g, step, 0u}}, k0, k1);
    for (int word = 0; word < 4; ++word)
      bits[4 * i + word] = words.v[word];
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
    std::uint32_t bits[kBlockColumns];
    float in_scratch[kBlockColumns], out_scratch[kBlockColumns];
    for (std::int64_t unit = begin; unit < end; ++unit) {
      const std::int64_t row = unit / blocks;
      const std::int64_t first = (unit % blocks) * kBlockColumns;
      const std::int64_t count = std::min(kBlockColumns, columns - first);
      const auto g = static_cast<std::uint32_t>(mask.row_start + mask.row_stride * row);
      block_bits(mask, step_word, g, static_cast<std::uint32_t>(first / 4), bits);
      const std::int64_t offset = row * columns + first;
      const float* x = load_floats(in, dtype, offset, count, in_scratch);
      float* y = output_floats(out, dtype, offset, out_scratch);
      for (std::int64_t j = 0; j < count; ++j)
        y[j] = x[j] * (bits[j] < mask.threshold ? 0.0f : mask.scale);
      store_floats(y, out, dtype, offset, count);
    }
  });
}

}  // namespace alloy::cpu
