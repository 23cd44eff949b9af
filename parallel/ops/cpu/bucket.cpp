#include <cstring>

#include "core/ops/cpu/element_access.h"
#include "parallel/ops/bucket.h"

namespace alloy::parallel::cpu {

using alloy::cpu::load_element;
using alloy::cpu::store_element;

void scaled_copy(const void* from, DType from_dtype, void* to, DType to_dtype, std::int64_t count,
                 float factor) {
  const auto bytes = static_cast<std::size_t>(count) * dtype_size(to_dtype);
  if (from == nullptr) {
    std::memset(to, 0, bytes);
    return;
  }
  if (from_dtype == to_dtype && factor == 1.0f) {
    std::memcpy(to, from, bytes);
    return;
  }
  for (std::int64_t i = 0; i < count; ++i)
    store_element(to, to_dtype, i, load_element(from, from_dtype, i) * factor);
}

}  // namespace alloy::parallel::cpu
