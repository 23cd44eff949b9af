#include "core/ops/normalize_channels.h"

#include <array>

#include "core/half.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

template <class Element, class Convert>
void lookup_planes(const std::uint8_t* images, const float* table, void* y, std::int64_t batch,
                   std::int64_t channels, std::int64_t plane, const Convert& convert) {
  auto* out = static_cast<Element*>(y);
  parallel_ranges(batch * channels, plane, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      // One channel's table in the output's dtype, rounded once per value.
      const float* row = table + (p % channels) * 256;
      std::array<Element, 256> lookup;
      for (int v = 0; v < 256; ++v)
        lookup[static_cast<std::size_t>(v)] = convert(row[v]);
      const std::uint8_t* in = images + p * plane;
      Element* to = out + p * plane;
      for (std::int64_t i = 0; i < plane; ++i)
        to[i] = lookup[in[i]];
    }
  });
}

}  // namespace

void normalize_channels(const std::uint8_t* images, const float* table, void* y, DType dtype,
                        std::int64_t batch, std::int64_t channels, std::int64_t plane) {
  switch (dtype) {
    case DType::f16:
      return lookup_planes<std::uint16_t>(images, table, y, batch, channels, plane,
                                          float_to_half_bits);
    case DType::bf16:
      return lookup_planes<std::uint16_t>(images, table, y, batch, channels, plane,
                                          float_to_bf16_bits);
    default:
      return lookup_planes<float>(images, table, y, batch, channels, plane,
                                  [](float value) { return value; });
  }
}

}  // namespace alloy::cpu
