#include "core/ops/fill.h"

#include <algorithm>
#include <cstring>

namespace alloy::cpu {

namespace {

template <class T>
void fill_as(void* data, std::uint32_t pattern, std::int64_t count) {
  T* elements = static_cast<T*>(data);
  std::fill(elements, elements + count, static_cast<T>(pattern));
}

}  // namespace

void fill(void* data, std::size_t element_size, std::uint32_t pattern, std::int64_t count) {
  if (count <= 0) return;
  if (pattern == 0) {
    std::memset(data, 0, static_cast<std::size_t>(count) * element_size);
    return;
  }
  switch (element_size) {
    case 1:
      fill_as<std::uint8_t>(data, pattern, count);
      return;
    case 2:
      fill_as<std::uint16_t>(data, pattern, count);
      return;
    case 4:
      fill_as<std::uint32_t>(data, pattern, count);
      return;
    default:
      fail("fill: elements of ", element_size, " bytes are not supported");
  }
}

}  // namespace alloy::cpu
