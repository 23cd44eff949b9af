// CUDA normalize_channels against the CPU kernel: the same table look-ups and one rounding, so
// results are bitwise equal in every output dtype.
#include <boost/test/unit_test.hpp>

#include "core/ops/normalize_channels.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(normalize_channels_gpu)

BOOST_AUTO_TEST_CASE(matches_the_cpu_bit_for_bit) {
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f};
  const std::vector<float> std = {0.229f, 0.224f, 0.225f};
  std::vector<float> pixels(static_cast<std::size_t>(6 * 3 * 13 * 11));
  for (std::size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<float>((i * 71 + i / 5) % 256);
  const Tensor images = Tensor::from_floats({6, 3, 13, 11}, pixels, DType::u8);
  const Tensor table = normalization_table(mean, std, Device::cpu());
  const Tensor gpu_table = normalization_table(mean, std, Device::cuda(0));
  BOOST_TEST(gpu_table.device().is_cuda());
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    check_gpu_equal(normalize_channels(to_cuda(images), gpu_table, dtype),
                    normalize_channels(images, table, dtype),
                    std::string("normalize_channels ") + dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_SUITE_END()
