// CUDA elementwise kernels against their CPU twins. Casts, add, scale and normalize_images
// compute one fp32 operation and round once, so they must match bit for bit (the rounding
// contract of core/half.h); axpby may differ by FMA contraction, within a few ulp.
#include <boost/test/unit_test.hpp>

#include "core/ops/elementwise.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
const Shape kShape{3, 1000, 7};  // not a multiple of any block size
}  // namespace

BOOST_AUTO_TEST_SUITE(elementwise_gpu)

BOOST_AUTO_TEST_CASE(cast_between_every_pair_is_bit_exact) {
  Generator generator(11);
  for (const DType from : kFloatTypes) {
    // Wide range: overflow to inf in f16, subnormals, ties.
    Tensor x = random_tensor(kShape, from, generator, -70000.0f, 70000.0f);
    for (const DType to : kFloatTypes) {
      check_gpu_equal(cast(to_cuda(x), to), cast(x, to),
                      std::string("cast ") + dtype_name(from) + "->" + dtype_name(to));
    }
    Tensor small = random_tensor(kShape, from, generator, -1e-6f, 1e-6f);
    for (const DType to : kFloatTypes) {
      check_gpu_equal(
          cast(to_cuda(small), to), cast(small, to),
          std::string("cast of tiny values ") + dtype_name(from) + "->" + dtype_name(to));
    }
  }
}

BOOST_AUTO_TEST_CASE(add_scale_and_axpby_match_the_cpu) {
  Generator generator(12);
  for (const DType a_type : kFloatTypes) {
    for (const DType b_type : kFloatTypes) {
      const Tensor a = random_tensor(kShape, a_type, generator);
      const Tensor b = random_tensor(kShape, b_type, generator);
      const std::string pair = std::string(dtype_name(a_type)) + "+" + dtype_name(b_type);
      check_gpu_equal(add(to_cuda(a), to_cuda(b)), add(a, b), "add " + pair);

      Tensor y_cpu = b.clone();
      Tensor y_gpu = to_cuda(b);
      axpby(0.75f, a, -1.5f, y_cpu);
      axpby(0.75f, to_cuda(a), -1.5f, y_gpu);
      check_gpu_close(y_gpu, y_cpu, "axpby " + pair, gpu_tolerance(b_type), 1e-6);

      // beta == 0 ignores y, NaN included.
      Tensor nan_cpu = Tensor::empty(kShape, b_type);
      nan_cpu.fill(NAN);
      Tensor nan_gpu = to_cuda(nan_cpu);
      axpby(2.0f, a, 0.0f, nan_cpu);
      axpby(2.0f, to_cuda(a), 0.0f, nan_gpu);
      check_gpu_equal(nan_gpu, nan_cpu, "axpby with beta 0 over NaN " + pair);
    }
    Tensor x_cpu = random_tensor(kShape, a_type, generator, -100.0f, 100.0f);
    Tensor x_gpu = to_cuda(x_cpu);
    scale(x_cpu, 1.0f / 3.0f);
    scale(x_gpu, 1.0f / 3.0f);
    check_gpu_equal(x_gpu, x_cpu, std::string("scale ") + dtype_name(a_type));
  }
}

BOOST_AUTO_TEST_CASE(normalize_images_is_bit_exact) {
  Tensor images = Tensor::empty({2, 1, 28, 28}, DType::u8);
  for (std::int64_t i = 0; i < images.numel(); ++i) {
    images.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 37 % 256);
  }
  for (const DType dtype : kFloatTypes) {
    check_gpu_equal(normalize_images(to_cuda(images), dtype), normalize_images(images, dtype),
                    std::string("normalize_images to ") + dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_SUITE_END()
