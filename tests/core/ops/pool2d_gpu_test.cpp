// CUDA pooling against the CPU kernels. The GPU sums each window (and gathers each input's
// shares) in the CPU's order, so averages match bit for bit; max pooling selects values and
// indices exactly. Max-pool backward with overlapping windows adds in atomics' order: within
// tolerance.
#include <boost/test/unit_test.hpp>
#include <limits>
#include <vector>

#include "core/ops/pool2d.h"
#include "tests/support/gpu.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {
const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
const Pool2dParams kGeometries[] = {
    {2, 2, 2, 2, 0, 0},  // LeNet's tiling windows
    {3, 3, 2, 2, 1, 1},  // resnet's overlapping, padded windows
    {3, 2, 1, 2, 1, 0},
};
}  // namespace

BOOST_AUTO_TEST_SUITE(pool2d_gpu)

// The fused ReLU and 2x2 pool on the GPU gives the CPU's bits (which are the unfused ops', as
// pool2d_test checks), ReLU's special inputs (-0, NaN, infinities) and an uncovered last row
// included; only NaN payloads may differ (the H200 sums a NaN to its canonical 0x7fffffff where
// x86 keeps the input's 0x7fc00000). Even widths move pairs of values, odd ones single values
// (an uncovered last column too).
BOOST_AUTO_TEST_CASE(relu_then_pool_fused_matches_the_cpu) {
  Generator generator(33);
  Pool2dParams halving;  // 2x2, stride 2, no padding
  for (const Shape& shape : {Shape{3, 5, 13, 14}, Shape{2, 3, 9, 9}, Shape{2, 2, 8, 6}})
    for (const DType dtype : kFloatTypes) {
      std::vector<float> values = random_tensor(shape, DType::f32, generator).to_floats();
      const float specials[] = {-0.0f, 0.0f, std::numeric_limits<float>::quiet_NaN(), INFINITY,
                                -INFINITY};
      for (std::size_t i = 0; i < values.size(); i += 7)
        values[i] = specials[(i / 7) % 5];
      const Tensor x = Tensor::from_floats(shape, values, dtype);
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape);
      const Tensor y = relu_avg_pool2d_forward(x, halving);
      const Tensor y_gpu = relu_avg_pool2d_forward(to_cuda(x), halving);
      check_gpu_equal(y_gpu, y, "relu_avg_pool2d_forward " + what);
      BOOST_TEST(same_bits_but_nan_payloads(to_host(y_gpu), y),
                 "relu_avg_pool2d_forward " << what << ": -0s too");
      for (const DType grad_type : {dtype, DType::f32}) {
        std::vector<float> grads = random_tensor(y.shape(), DType::f32, generator).to_floats();
        grads[0] = -0.0f;
        const Tensor dy = Tensor::from_floats(y.shape(), grads, grad_type);
        const std::string name =
            "relu_avg_pool2d_backward " + what + " with " + dtype_name(grad_type) + " gradients";
        const Tensor dx = relu_avg_pool2d_backward(x, dy, halving);
        const Tensor dx_gpu = relu_avg_pool2d_backward(to_cuda(x), to_cuda(dy), halving);
        check_gpu_equal(dx_gpu, dx, name);
        BOOST_TEST(same_bits_but_nan_payloads(to_host(dx_gpu), dx), name << ": -0s too");
      }
    }
}

BOOST_AUTO_TEST_CASE(average_pooling_matches_the_cpu) {
  Generator generator(31);
  for (const Shape& shape : {Shape{3, 5, 14, 13}, Shape{3, 5, 13, 14}})
    for (const DType dtype : kFloatTypes) {
      for (const Pool2dParams& params : kGeometries) {
        const Tensor x = random_tensor(shape, dtype, generator);
        const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape) +
                                 " kernel " + std::to_string(params.kernel_h) + " stride " +
                                 std::to_string(params.stride_h);
        const Tensor y = avg_pool2d_forward(x, params);
        check_gpu_equal(avg_pool2d_forward(to_cuda(x), params), y, "avg_pool2d_forward " + what);
        const Tensor dy = random_tensor(y.shape(), dtype, generator);
        check_gpu_equal(avg_pool2d_backward(to_cuda(dy), x.shape(), params),
                        avg_pool2d_backward(dy, x.shape(), params), "avg_pool2d_backward " + what);
      }
    }
}

BOOST_AUTO_TEST_CASE(max_pooling_matches_the_cpu) {
  Generator generator(32);
  for (const DType dtype : kFloatTypes) {
    for (const Pool2dParams& params : kGeometries) {
      // Few distinct values, so ties (first maximum wins) are common.
      Tensor x = random_tensor({2, 4, 15, 12}, dtype, generator, -4.0f, 4.0f);
      std::vector<float> values = x.to_floats();
      for (float& value : values)
        value = std::round(value);
      x.copy_from_floats(values);
      const std::string what = std::string(dtype_name(dtype)) + " kernel " +
                               std::to_string(params.kernel_h) + " stride " +
                               std::to_string(params.stride_h);
      const MaxPoolResult cpu = max_pool2d_forward(x, params);
      const MaxPoolResult gpu = max_pool2d_forward(to_cuda(x), params);
      check_gpu_equal(gpu.y, cpu.y, "max_pool2d_forward values " + what);
      check_gpu_equal(gpu.argmax, cpu.argmax, "max_pool2d_forward argmax " + what);
      const Tensor dy = random_tensor(cpu.y.shape(), dtype, generator);
      check_gpu_close(max_pool2d_backward(to_cuda(dy), gpu.argmax, x.shape()),
                      max_pool2d_backward(dy, cpu.argmax, x.shape()), "max_pool2d_backward " + what,
                      gpu_tolerance(dtype), 1e-6);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
