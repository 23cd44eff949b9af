#include "core/ops/ema_update.h"

#include <algorithm>
#include <cmath>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

// The elements of all tensors form one range split over the thread pool: one fork per call
// however many tensors there are. Half values are widened a block at a time into stack scratch.
void ema_update(const std::vector<EmaBuffers>& tensors, float decay) {
  const float one_minus_decay = 1.0f - decay;
  std::vector<std::int64_t> start(tensors.size() + 1, 0);
  for (std::size_t t = 0; t < tensors.size(); ++t)
    start[t + 1] = start[t] + tensors[t].count;
  parallel_ranges(start.back(), 1, [&](std::int64_t begin, std::int64_t end) {
    ElementScratch scratch;
    // The first tensor with elements at or after `begin`.
    auto t = static_cast<std::size_t>(std::upper_bound(start.begin(), start.end(), begin) -
                                      start.begin() - 1);
    for (; t < tensors.size() && start[t] < end; ++t) {
      const EmaBuffers& tensor = tensors[t];
      const std::int64_t last = std::min(end, start[t + 1]) - start[t];
      for (std::int64_t offset = std::max(begin, start[t]) - start[t]; offset < last;
           offset += kElementBlock) {
        const std::int64_t count = std::min(kElementBlock, last - offset);
        const float* v =
            load_floats(tensor.value, tensor.value_dtype, offset, count, scratch.data());
        float* a = tensor.average + offset;
        for (std::int64_t i = 0; i < count; ++i)
          a[i] = std::fma(decay, a[i], one_minus_decay * v[i]);
      }
    }
  });
}

}  // namespace alloy::cpu
