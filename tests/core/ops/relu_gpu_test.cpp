// CUDA ReLU against the CPU kernel: both select stored values, so results are bitwise equal.
#include <boost/test/unit_test.hpp>

#include "core/ops/relu.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(relu_gpu)

BOOST_AUTO_TEST_CASE(forward_and_backward_are_bit_exact) {
  Generator generator(21);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  for (const DType dtype : types) {
    Tensor x = random_tensor({4, 3, 17, 19}, dtype, generator);
    // Signed zeros and a NaN among the inputs.
    std::vector<float> values = x.to_floats();
    values[0] = -0.0f;
    values[1] = 0.0f;
    values[2] = NAN;
    x.copy_from_floats(values);
    const Tensor y = relu_forward(x);
    const Tensor y_gpu = relu_forward(to_cuda(x));
    check_gpu_equal(y_gpu, y, std::string("relu_forward ") + dtype_name(dtype));
    for (const DType grad_type : types) {
      const Tensor dy = random_tensor(x.shape(), grad_type, generator);
      check_gpu_equal(
          relu_backward(y_gpu, to_cuda(dy)), relu_backward(y, dy),
          std::string("relu_backward ") + dtype_name(dtype) + "/" + dtype_name(grad_type));
    }
  }
}

// The kernels move 16-byte packs when every operand is aligned to one, the elements after the
// last pack one by one, and everything one by one otherwise: views one element into a buffer,
// and counts below, at and past a pack, take each path.
BOOST_AUTO_TEST_CASE(misaligned_views_and_partial_packs_are_bit_exact) {
  Generator generator(22);
  for (const DType dtype : {DType::f32, DType::f16}) {
    const std::size_t element = dtype_size(dtype);
    for (const std::int64_t count : {1, 7, 8, 8 * 37 + 5}) {
      for (const std::size_t offset : {std::size_t{0}, element}) {
        const Tensor x_buffer = random_tensor({count + 1}, dtype, generator);
        const Tensor dy_buffer = random_tensor({count + 1}, dtype, generator);
        const Tensor x = x_buffer.view(offset, {count}, dtype);
        const Tensor dy = dy_buffer.view(offset, {count}, dtype);
        const Tensor x_gpu = to_cuda(x_buffer).view(offset, {count}, dtype);
        const Tensor dy_gpu = to_cuda(dy_buffer).view(offset, {count}, dtype);
        const std::string what = std::string(dtype_name(dtype)) + " count " +
                                 std::to_string(count) + " offset " + std::to_string(offset);
        const Tensor y = relu_forward(x);
        const Tensor y_gpu = relu_forward(x_gpu);
        check_gpu_equal(y_gpu, y, "relu_forward " + what);
        check_gpu_equal(relu_backward(y_gpu, dy_gpu), relu_backward(y, dy),
                        "relu_backward " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
