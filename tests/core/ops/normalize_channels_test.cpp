// normalize_channels: each channel's pixels become (value / 255 - mean) / std, computed in fp32
// as torchvision's ToTensor and Normalize do, and rounded once to the output's dtype.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "core/ops/normalize_channels.h"

using namespace alloy;

BOOST_AUTO_TEST_SUITE(normalize_channels_op)

BOOST_AUTO_TEST_CASE(each_channel_takes_its_own_mean_and_std) {
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f};
  const std::vector<float> std = {0.229f, 0.224f, 0.225f};
  const Tensor table = normalization_table(mean, std, Device::cpu());
  BOOST_TEST((table.shape() == Shape{3, 256}));
  const std::int64_t n = 5, h = 7, w = 9;
  std::vector<float> pixels(static_cast<std::size_t>(n * 3 * h * w));
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<float>((i * 53 + i / 7) % 256);
  const Tensor images = Tensor::from_floats({n, 3, h, w}, pixels, DType::u8);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      const Tensor y = normalize_channels(images, table, dtype);
      BOOST_TEST((y.dtype() == dtype));
      BOOST_TEST((y.shape() == images.shape()));
      const std::vector<float> values = y.to_floats();
      int mismatches = 0;
      for (std::size_t i = 0; i < pixels.size(); ++i) {
        const std::size_t channel = (i / static_cast<std::size_t>(h * w)) % 3;
        const float expected = (pixels[i] / 255.0f - mean[channel]) / std[channel];
        float rounded = expected;
        if (dtype == DType::f16) rounded = half_bits_to_float(float_to_half_bits(expected));
        if (dtype == DType::bf16) rounded = bf16_bits_to_float(float_to_bf16_bits(expected));
        mismatches += values[i] != rounded;
      }
      BOOST_TEST(mismatches == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_inputs) {
  const Tensor table = normalization_table({0.5f}, {0.25f}, Device::cpu());
  const Tensor rgb = Tensor::zeros({1, 3, 2, 2}, DType::u8);
  BOOST_CHECK_THROW(normalize_channels(rgb, table, DType::f32), Error);  // one channel's table
  BOOST_CHECK_THROW(normalize_channels(Tensor::zeros({1, 1, 2, 2}, DType::f32), table, DType::f32),
                    Error);
  BOOST_CHECK_THROW(normalize_channels(Tensor::zeros({1, 1, 2, 2}, DType::u8), table, DType::u8),
                    Error);
  BOOST_CHECK_THROW(normalization_table({0.5f}, {0.0f}, Device::cpu()), Error);
  BOOST_CHECK_THROW(normalization_table({0.5f, 0.5f}, {1.0f}, Device::cpu()), Error);
}

BOOST_AUTO_TEST_SUITE_END()
