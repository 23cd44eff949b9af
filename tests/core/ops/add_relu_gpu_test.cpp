// CUDA add_relu against the CPU kernels: one fp32 add (unfused, correctly rounded) and a sign
// test, so results are bitwise equal in every dtype mix.
#include <boost/test/unit_test.hpp>

#include "core/ops/add_relu.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(add_relu_gpu)

BOOST_AUTO_TEST_CASE(forward_and_backward_are_bit_exact) {
  Generator generator(31);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  const Shape shape{4, 3, 17, 19};
  for (const DType a_type : types) {
    for (const DType b_type : types) {
      const std::string what = std::string(dtype_name(a_type)) + " + " + dtype_name(b_type);
      Tensor a = random_tensor(shape, a_type, generator);
      // Signed zeros and a NaN among the inputs.
      std::vector<float> values = a.to_floats();
      values[0] = -0.0f;
      values[1] = 0.0f;
      values[2] = NAN;
      a.copy_from_floats(values);
      const Tensor b = random_tensor(shape, b_type, generator);
      const Tensor y = add_relu_forward(a, b);
      const Tensor y_gpu = add_relu_forward(to_cuda(a), to_cuda(b));
      check_gpu_equal(y_gpu, y, "add_relu_forward " + what);
      for (const DType main_type : types) {
        const Tensor dy = random_tensor(shape, b_type, generator);
        const Tensor d_main = random_tensor(shape, main_type, generator);
        check_gpu_equal(add_relu_backward(y_gpu, to_cuda(dy), to_cuda(d_main)),
                        add_relu_backward(y, dy, d_main),
                        "add_relu_backward y " + what + " d_main " + dtype_name(main_type));
      }
    }
  }
}

// 16-byte packs where every operand is aligned to one (f16 and f32 operands: packs of 4), one
// by one past the last pack and for views one element into a buffer.
BOOST_AUTO_TEST_CASE(misaligned_views_and_partial_packs_are_bit_exact) {
  Generator generator(32);
  for (const DType dtype : {DType::f32, DType::f16}) {
    for (const DType other : {DType::f16, DType::f32}) {
      for (const std::int64_t count : {3, 8, 8 * 29 + 7}) {
        for (const bool shifted : {false, true}) {
          const auto view = [&](const Tensor& buffer) {
            const std::size_t offset = shifted ? dtype_size(buffer.dtype()) : 0;
            return buffer.view(offset, {count}, buffer.dtype());
          };
          const Tensor a = random_tensor({count + 1}, dtype, generator);
          const Tensor b = random_tensor({count + 1}, other, generator);
          const Tensor dy = random_tensor({count + 1}, other, generator);
          const Tensor d_main = random_tensor({count + 1}, dtype, generator);
          const std::string what = std::string(dtype_name(dtype)) + "/" + dtype_name(other) +
                                   " count " + std::to_string(count) +
                                   (shifted ? " one element in" : "");
          const Tensor y = add_relu_forward(view(a), view(b));
          const Tensor y_gpu = add_relu_forward(view(to_cuda(a)), view(to_cuda(b)));
          check_gpu_equal(y_gpu, y, "add_relu_forward " + what);
          check_gpu_equal(add_relu_backward(y_gpu, view(to_cuda(dy)), view(to_cuda(d_main))),
                          add_relu_backward(y, view(dy), view(d_main)),
                          "add_relu_backward " + what);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
