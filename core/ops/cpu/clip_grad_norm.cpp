#include "core/ops/clip_grad_norm.h"

#include <algorithm>
#include <array>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Each tensor is cut into chunks of this many elements whatever the thread count; a chunk's
// squares are summed in order, and the chunks' sums in chunk order, so the result does not
// depend on how the chunks are shared out.
constexpr std::int64_t kChunk = std::int64_t{1} << 14;

struct Chunk {
  const NormItem* item;
  std::int64_t offset, count;
};

double chunk_squares(const Chunk& chunk, float unscale) {
  std::array<float, kElementBlock> scratch;
  double sum = 0.0;
  for (std::int64_t done = 0; done < chunk.count; done += kElementBlock) {
    const std::int64_t count = std::min(kElementBlock, chunk.count - done);
    const float* x = load_floats(chunk.item->data, chunk.item->dtype, chunk.offset + done, count,
                                 scratch.data());
    for (std::int64_t i = 0; i < count; ++i) {
      const double value = x[i] * unscale;  // rounded to f32 first, as the update's product
      sum += value * value;
    }
  }
  return sum;
}

}  // namespace

double sum_of_squares(const std::vector<NormItem>& items, float unscale) {
  std::vector<Chunk> chunks;
  for (const NormItem& item : items) {
    for (std::int64_t offset = 0; offset < item.count; offset += kChunk)
      chunks.push_back({&item, offset, std::min(kChunk, item.count - offset)});
  }
  std::vector<double> sums(chunks.size(), 0.0);
  parallel_ranges(static_cast<std::int64_t>(chunks.size()), kChunk,
                  [&](std::int64_t begin, std::int64_t end) {
                    for (std::int64_t c = begin; c < end; ++c) {
                      sums[static_cast<std::size_t>(c)] =
                          chunk_squares(chunks[static_cast<std::size_t>(c)], unscale);
                    }
                  });
  double total = 0.0;
  for (const double sum : sums)
    total += sum;
  return total;
}

void clip_grad_norm(const std::vector<NormItem>& items, float max_norm, float* norm,
                    float* coefficient, ClipTally* tally, float unscale) {
  finish_clip_grad_norm(sum_of_squares(items, unscale), max_norm, norm, coefficient, tally);
}

}  // namespace alloy::cpu
