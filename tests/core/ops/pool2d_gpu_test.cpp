// CUDA pooling against the CPU kernels. The GPU sums each window (and gathers each input's
// shares) in the CPU's order, so averages match bit for bit; max pooling selects values and
// indices exactly. Max-pool backward with overlapping windows adds in atomics' order: within
// tolerance.
#include <boost/test/unit_test.hpp>

#include "core/ops/pool2d.h"
#include "tests/support/gpu.h"

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

BOOST_AUTO_TEST_CASE(average_pooling_matches_the_cpu) {
  Generator generator(31);
  for (const DType dtype : kFloatTypes) {
    for (const Pool2dParams& params : kGeometries) {
      const Tensor x = random_tensor({3, 5, 14, 13}, dtype, generator);
      const std::string what = std::string(dtype_name(dtype)) + " kernel " +
                               std::to_string(params.kernel_h) + " stride " +
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
