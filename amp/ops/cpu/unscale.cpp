#include <cmath>

#include "amp/ops/unscale.h"
#include "core/ops/cpu/element_access.h"
#include "core/thread_pool.h"

namespace alloy::amp::cpu {

using alloy::cpu::load_element;
using alloy::cpu::store_element;

bool unscale_and_check(const void* grad, DType grad_dtype, void* output, DType output_dtype,
                       std::int64_t count, float inverse_scale) {
  ThreadPool& pool = cpu_pool();
  std::vector<char> chunk_bad(static_cast<std::size_t>(pool.size()), 0);
  pool.parallel_for(count, [&](std::int64_t begin, std::int64_t end, int chunk) {
    bool bad = false;
    if (output == nullptr) {
      for (std::int64_t i = begin; i < end; ++i)
        bad |= !std::isfinite(load_element(grad, grad_dtype, i));
    } else {
      for (std::int64_t i = begin; i < end; ++i) {
        const float value = load_element(grad, grad_dtype, i);
        bad |= !std::isfinite(value);
        store_element(output, output_dtype, i, value * inverse_scale);
      }
    }
    chunk_bad[static_cast<std::size_t>(chunk)] = bad;
  });
  for (const char bad : chunk_bad) {
    if (bad) return true;
  }
  return false;
}

}  // namespace alloy::amp::cpu
