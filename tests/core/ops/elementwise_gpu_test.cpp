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

// 16-byte packs where every operand is aligned to one, one by one past the last pack and for
// views one element into a buffer (a cast and an add of mixed types, in place scale, axpby).
BOOST_AUTO_TEST_CASE(misaligned_views_and_partial_packs_are_bit_exact) {
  Generator generator(13);
  for (const std::int64_t count : {5, 16, 8 * 41 + 3}) {
    for (const bool shifted : {false, true}) {
      const auto view = [&](const Tensor& buffer) {
        const std::size_t offset = shifted ? dtype_size(buffer.dtype()) : 0;
        return buffer.view(offset, {count}, buffer.dtype());
      };
      const std::string what =
          " count " + std::to_string(count) + (shifted ? " one element in" : "");
      const Tensor h = random_tensor({count + 1}, DType::f16, generator);
      const Tensor f = random_tensor({count + 1}, DType::f32, generator);
      check_gpu_equal(cast(view(to_cuda(h)), DType::f32), cast(view(h), DType::f32),
                      "cast f16->f32" + what);
      check_gpu_equal(add(view(to_cuda(h)), view(to_cuda(f))), add(view(h), view(f)),
                      "add f16+f32" + what);
      Tensor x_cpu = f.clone(), x_gpu = to_cuda(f);
      Tensor xv_cpu = view(x_cpu), xv_gpu = view(x_gpu);
      scale(xv_cpu, 1.0f / 3.0f);
      scale(xv_gpu, 1.0f / 3.0f);
      check_gpu_equal(x_gpu, x_cpu, "scale f32 (and the element outside the view)" + what);
      Tensor y_cpu = h.clone(), y_gpu = to_cuda(h);
      Tensor yv_cpu = view(y_cpu), yv_gpu = view(y_gpu);
      axpby(0.75f, view(f), -1.5f, yv_cpu);
      axpby(0.75f, view(to_cuda(f)), -1.5f, yv_gpu);
      check_gpu_close(y_gpu, y_cpu, "axpby f32 into f16" + what, gpu_tolerance(DType::f16), 1e-6);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
