// Channels-last CUDA pooling against the CPU's NCHW pooling permuted: every result bit for bit
// (the kernels sum each window, gather each input's shares, and add each plane's max-pool
// gradients in the CPU's order, without atomics, overlapping windows included).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/permute.h"
#include "core/ops/pool2d.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {
const Pool2dParams kGeometries[] = {
    {2, 2, 2, 2, 0, 0},  // LeNet's tiling windows
    {3, 3, 2, 2, 1, 1},  // resnet's overlapping, padded windows
    {3, 2, 1, 2, 1, 0},
};
// Odd channel counts (one of more than a warp) and odd planes.
const Shape kShapes[] = {{3, 5, 13, 11}, {2, 37, 7, 7}};

std::string describe(DType dtype, const Shape& shape, const Pool2dParams& p) {
  return std::string(dtype_name(dtype)) + " x " + shape_str(shape) + " kernel " +
         std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " stride " +
         std::to_string(p.stride_h) + "x" + std::to_string(p.stride_w);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(pool2d_nhwc_gpu)

BOOST_AUTO_TEST_CASE(average_pooling_matches_the_cpu) {
  Generator generator(51);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Shape& shape : kShapes) {
      for (const Pool2dParams& params : kGeometries) {
        const std::string what = describe(dtype, shape, params);
        const Tensor x = random_tensor(shape, dtype, generator);
        const Tensor x_last = to_channels_last(x);
        const Tensor y = avg_pool2d_forward(x, params);
        check_gpu_equal(avg_pool2d_forward(to_cuda(x_last), params, Layout::nhwc),
                        to_channels_last(y), "avg_pool2d_forward " + what);
        const Tensor dy = random_tensor(y.shape(), dtype, generator);
        check_gpu_equal(avg_pool2d_backward(to_cuda(to_channels_last(dy)), x_last.shape(), params,
                                            Layout::nhwc),
                        to_channels_last(avg_pool2d_backward(dy, shape, params)),
                        "avg_pool2d_backward " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(max_pooling_matches_the_cpu) {
  Generator generator(52);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const Shape& shape : kShapes) {
      for (const Pool2dParams& params : kGeometries) {
        const std::string what = describe(dtype, shape, params);
        // Few distinct values, so ties (first maximum wins) are common.
        Tensor x = random_tensor(shape, dtype, generator, -4.0f, 4.0f);
        std::vector<float> values = x.to_floats();
        for (float& value : values)
          value = std::round(value);
        x.copy_from_floats(values);
        const Tensor x_last = to_channels_last(x);
        const MaxPoolResult cpu = max_pool2d_forward(x, params);
        const MaxPoolResult gpu = max_pool2d_forward(to_cuda(x_last), params, Layout::nhwc);
        check_gpu_equal(gpu.y, to_channels_last(cpu.y), "max_pool2d_forward values " + what);
        check_gpu_equal(gpu.argmax, to_channels_last(cpu.argmax),
                        "max_pool2d_forward argmax " + what);
        const Tensor dy = random_tensor(cpu.y.shape(), dtype, generator);
        check_gpu_equal(max_pool2d_backward(to_cuda(to_channels_last(dy)), gpu.argmax,
                                            x_last.shape(), Layout::nhwc),
                        to_channels_last(max_pool2d_backward(dy, cpu.argmax, shape)),
                        "max_pool2d_backward " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
