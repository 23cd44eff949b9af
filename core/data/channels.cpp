#include "core/data/channels.h"

#include <cstring>

#include "core/error.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::data {

Dataset convert_channels(const Dataset& dataset, int channels) {
  const Tensor& images = dataset.images;
  const std::int64_t from = images.dim(1);
  if (from == channels) return dataset;
  ALLOY_CHECK((from == 1 || from == 3) && (channels == 1 || channels == 3), "dataset ",
              dataset.name, ": cannot convert ", from, "-channel images to ", channels,
              " channels (1 and 3 are supported)");
  const std::int64_t count = images.dim(0);
  const std::int64_t plane = images.dim(2) * images.dim(3);
  Dataset converted = dataset;
  converted.images = Tensor::empty({count, channels, images.dim(2), images.dim(3)}, DType::u8,
                                   Device::cpu(), MemoryCategory::data);
  const std::uint8_t* in = images.data<std::uint8_t>();
  std::uint8_t* out = converted.images.data<std::uint8_t>();
  cpu::parallel_ranges(count, plane * 3, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n) {
      if (channels == 3) {
        for (int c = 0; c < 3; ++c)
          std::memcpy(out + (n * 3 + c) * plane, in + n * plane, static_cast<std::size_t>(plane));
        continue;
      }
      const std::uint8_t* r = in + n * 3 * plane;
      const std::uint8_t* g = r + plane;
      const std::uint8_t* b = g + plane;
      std::uint8_t* l = out + n * plane;
      for (std::int64_t i = 0; i < plane; ++i) {
        l[i] = static_cast<std::uint8_t>((19595u * r[i] + 38470u * g[i] + 7471u * b[i] + 0x8000u) >>
                                         16);
      }
    }
  });
  return converted;
}

}  // namespace alloy::data
