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

BOOST_AUTO_TEST_SUITE_END()
