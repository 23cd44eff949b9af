#include "core/ops/normalize_channels.h"

#include "core/error.h"
#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/normalize_channels.h"
#endif

namespace alloy {

Tensor normalization_table(const std::vector<float>& mean, const std::vector<float>& std,
                           Device device) {
  ALLOY_CHECK(!mean.empty() && mean.size() == std.size(), "normalization_table: ", mean.size(),
              " means and ", std.size(), " standard deviations; needs one of each per channel");
  const auto channels = static_cast<std::int64_t>(mean.size());
  std::vector<float> values(static_cast<std::size_t>(channels) * 256);
  for (std::size_t c = 0; c < mean.size(); ++c) {
    ALLOY_CHECK(std[c] > 0.0f, "normalization_table: channel ", c,
                "'s standard deviation must be positive, got ", std[c]);
    for (int v = 0; v < 256; ++v) {
      const float pixel = static_cast<float>(v) / 255.0f;
      values[c * 256 + static_cast<std::size_t>(v)] = (pixel - mean[c]) / std[c];
    }
  }
  Tensor table = Tensor::empty({channels, 256}, DType::f32, Device::cpu(), MemoryCategory::data);
  table.copy_from_floats(values);
  if (device.is_cpu()) return table;
  Tensor placed = Tensor::empty(table.shape(), DType::f32, device, MemoryCategory::data);
  placed.copy_from(table);
  return placed;
}

Tensor normalize_channels(const Tensor& images, const Tensor& table, DType dtype) {
  constexpr const char* op = "normalize_channels";
  const Device device = common_device(op, {&images, &table});
  check_dtype(op, "images", images, DType::u8);
  check_rank(op, "images", images, 4);
  check_dtype(op, "table", table, DType::f32);
  check_shape(op, "table", table, {images.dim(1), 256});
  ALLOY_CHECK(is_floating(dtype), op, ": target dtype must be f32, f16 or bf16, got ",
              dtype_name(dtype));
  Tensor y = Tensor::empty(images.shape(), dtype, device, MemoryCategory::activations);
  ALLOY_RUN_KERNEL(op, device, normalize_channels, images.data<std::uint8_t>(), table.data<float>(),
                   y.raw(), dtype, images.dim(0), images.dim(1), images.dim(2) * images.dim(3));
  return y;
}

}  // namespace alloy
