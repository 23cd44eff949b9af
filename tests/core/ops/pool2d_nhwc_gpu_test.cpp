// Channels-last CUDA pooling against the CPU's NCHW pooling permuted: every result bit for bit
// (the kernels sum each window, gather each input's shares, and add each plane's max-pool
// gradients in the CPU's order, without atomics, overlapping windows included).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
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

// Both pools' kernels (and the max-pool backward's memset and rounding of its fp32 sums)
// capture into a CUDA graph whose replay gives the eager calls' bits.
BOOST_AUTO_TEST_CASE(captured_pools_replay_like_eager_calls) {
  Generator generator(53);
  const Pool2dParams params{3, 3, 2, 2, 1, 1};
  const Tensor x = to_cuda(random_tensor({2, 9, 7, 5}, DType::bf16, generator));
  const Shape y_shape = pool2d_output_shape(x.shape(), params, Layout::nhwc);
  const Tensor dy = to_cuda(random_tensor(y_shape, DType::bf16, generator));
  const MaxPoolResult max_eager = max_pool2d_forward(x, params, Layout::nhwc);
  const Tensor max_dx_eager = max_pool2d_backward(dy, max_eager.argmax, x.shape(), Layout::nhwc);
  const Tensor avg_eager = avg_pool2d_forward(x, params, Layout::nhwc);
  const Tensor avg_dx_eager = avg_pool2d_backward(dy, x.shape(), params, Layout::nhwc);
  MaxPoolResult max;
  Tensor max_dx, avg, avg_dx;
  const std::unique_ptr<CapturedWork> graph = capture_cuda_work(Device::cuda(0), [&] {
    max = max_pool2d_forward(x, params, Layout::nhwc);
    max_dx = max_pool2d_backward(dy, max.argmax, x.shape(), Layout::nhwc);
    avg = avg_pool2d_forward(x, params, Layout::nhwc);
    avg_dx = avg_pool2d_backward(dy, x.shape(), params, Layout::nhwc);
  });
  graph->replay();
  check_gpu_equal(max.y, to_host(max_eager.y), "max y replayed");
  check_gpu_equal(max.argmax, to_host(max_eager.argmax), "argmax replayed");
  check_gpu_equal(max_dx, to_host(max_dx_eager), "max dx replayed");
  check_gpu_equal(avg, to_host(avg_eager), "avg y replayed");
  check_gpu_equal(avg_dx, to_host(avg_dx_eager), "avg dx replayed");
}

BOOST_AUTO_TEST_SUITE_END()
