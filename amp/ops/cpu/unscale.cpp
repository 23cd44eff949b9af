#include <cmath>

#include "amp/ops/unscale.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace alloy::amp::cpu {

namespace {

float load(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f16:
      return half_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DType::bf16:
      return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

void store(void* data, DType dtype, std::int64_t i, float value) {
  switch (dtype) {
    case DType::f16:
      static_cast<std::uint16_t*>(data)[i] = float_to_half_bits(value);
      break;
    case DType::bf16:
      static_cast<std::uint16_t*>(data)[i] = float_to_bf16_bits(value);
      break;
    default:
      static_cast<float*>(data)[i] = value;
      break;
  }
}

}  // namespace

bool unscale_and_check(const void* grad, DType grad_dtype, void* output, DType output_dtype,
                       std::int64_t count, float inverse_scale) {
  ThreadPool& pool = cpu_pool();
  std::vector<char> chunk_bad(static_cast<std::size_t>(pool.size()), 0);
  pool.parallel_for(count, [&](std::int64_t begin, std::int64_t end, int chunk) {
    bool bad = false;
    for (std::int64_t i = begin; i < end; ++i) {
      const float value = load(grad, grad_dtype, i);
      bad |= !std::isfinite(value);
      store(output, output_dtype, i, value * inverse_scale);
    }
    chunk_bad[static_cast<std::size_t>(chunk)] = bad;
  });
  for (const char bad : chunk_bad) {
    if (bad) return true;
  }
  return false;
}

}  // namespace alloy::amp::cpu
