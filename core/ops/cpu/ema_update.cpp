#include "core/ops/ema_update.h"

#include <algorithm>
#include <cmath>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// The documented arithmetic over one block (a and v may be the same memory).
[[gnu::always_inline]] inline void update_block(float* a, const float* v, std::int64_t count,
                                                float decay, float one_minus_decay) {
  for (std::int64_t i = 0; i < count; ++i)
    a[i] = std::fma(decay, a[i], one_minus_decay * v[i]);
}

#if defined(__x86_64__) && !defined(__FMA__)
// Compiled without FMA (ALLOY_NATIVE=OFF), std::fma is a call into libm per element, several
// times slower; this copy of the loop has the instruction and runs where the CPU has it. fma
// rounds once in either form, so the choice changes no bits, only the speed.
__attribute__((target("avx2,fma"))) void update_block_fma(float* a, const float* v,
                                                          std::int64_t count, float decay,
                                                          float one_minus_decay) {
  update_block(a, v, count, decay, one_minus_decay);
}

bool cpu_has_fma() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}
#endif

void update(float* a, const float* v, std::int64_t count, float decay, float one_minus_decay) {
#if defined(__x86_64__) && !defined(__FMA__)
  if (cpu_has_fma()) return update_block_fma(a, v, count, decay, one_minus_decay);
#endif
  update_block(a, v, count, decay, one_minus_decay);
}

}  // namespace

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
        update(tensor.average + offset, v, count, decay, one_minus_decay);
      }
    }
  });
}

}  // namespace alloy::cpu
