// The channels-last cuDNN convolution (NHWC tensors, KRSC filter copies, the KRSC filter
// gradient added into the KCRS dw) against the CPU's NCHW convolution permuted, in every dtype,
// with odd channel counts and planes, biases, accumulation into dw and db, and O1's f32 weight
// gradients of half data.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops/conv2d.h"
#include "core/ops/permute.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/ops/cuda/conv2d.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(conv2d_nhwc_gpu)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_the_cpu) {
  Generator generator(91);
  struct Case {
    Shape x, w;
    Conv2dParams params;
  };
  const Case cases[] = {
      {{2, 3, 7, 7}, {5, 3, 3, 3}, {1, 1, 1, 1}},
      {{2, 5, 9, 9}, {6, 5, 3, 3}, {2, 2, 1, 1}},
      {{3, 7, 5, 5}, {9, 7, 1, 1}, {1, 1, 0, 0}},
      {{2, 12, 6, 6}, {4, 12, 3, 3}, {1, 1, 0, 0}},
      // More rows than the bias gradient's 32 lanes per channel, channels over one 32-tile.
      {{4, 3, 9, 9}, {37, 3, 3, 3}, {1, 1, 1, 1}},
  };
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const double tol = gpu_tolerance(dtype);
    for (const Case& c : cases) {
      const double fan_in = static_cast<double>(c.w[1] * c.w[2] * c.w[3]);
      const double atol = (dtype == DType::f32 ? 1e-5 : tol) * std::sqrt(fan_in);
      const std::string what =
          std::string(dtype_name(dtype)) + " x " + shape_str(c.x) + " w " + shape_str(c.w);
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator, -0.2f, 0.2f);
      const Tensor b = random_tensor({c.w[0]}, dtype, generator);
      const Tensor x_last = to_cuda(to_channels_last(x));
      const Tensor y = to_channels_last(conv2d_forward(x, w, b, c.params));
      const Tensor y_magnitude =
          to_channels_last(conv2d_forward(abs_f32(x), abs_f32(w), abs_f32(b), c.params));
      // The bias is added to the rounded convolution: one more rounding for half outputs.
      check_gpu_close_to_magnitude(
          conv2d_forward(x_last, to_cuda(w), to_cuda(b), c.params, Layout::nhwc), y, y_magnitude,
          "conv2d_forward " + what, 2 * tol, atol, magnitude_scale(dtype));

      const Tensor dy = random_tensor(conv2d_output_shape(c.x, c.w, c.params), dtype, generator);
      Tensor dw_magnitude = Tensor::zeros(c.w, DType::f32);
      Tensor db_magnitude = Tensor::zeros({c.w[0]}, DType::f32);
      const Tensor dx_magnitude =
          to_channels_last(conv2d_backward(abs_f32(x), abs_f32(w), abs_f32(dy), dw_magnitude,
                                           db_magnitude, c.params, true)
                               .dx);
      for (const DType grad_type : {dtype, DType::f32}) {
        Tensor dw = random_tensor(c.w, grad_type, generator);
        Tensor db = random_tensor({c.w[0]}, grad_type, generator);
        Tensor dw_gpu = to_cuda(dw), db_gpu = to_cuda(db);
        const Conv2dGrads cpu = conv2d_backward(x, w, dy, dw, db, c.params, true);
        const Conv2dGrads gpu = conv2d_backward(x_last, to_cuda(w), to_cuda(to_channels_last(dy)),
                                                dw_gpu, db_gpu, c.params, true, Layout::nhwc);
        const std::string grads = what + " with " + dtype_name(grad_type) + " accumulators";
        const double count = static_cast<double>(dy.numel() / dy.dim(1));
        const double grad_atol = (grad_type == DType::f32 ? 1e-5 : tol) * std::sqrt(count);
        check_gpu_close_to_magnitude(dw_gpu, dw, dw_magnitude, "dw " + grads,
                                     gpu_tolerance(grad_type), grad_atol,
                                     magnitude_scale(DType::f32));
        check_gpu_close(db_gpu, db, "db " + grads, gpu_tolerance(grad_type), grad_atol);
        check_gpu_close_to_magnitude(gpu.dx, to_channels_last(cpu.dx), dx_magnitude, "dx " + grads,
                                     tol, atol, magnitude_scale(dtype));
      }
    }
  }
}

// With zero weights y is the bias broadcast over every pixel, bit for bit, whatever cuDNN
// does: the channels-last bias kernel's indexing, with channel counts that do not divide a
// 16-byte pack (3, 5, 11) and one that spans several (20).
BOOST_AUTO_TEST_CASE(the_bias_lands_on_every_channel_in_every_dtype) {
  Generator generator(92);
  const struct {
    Shape x, w;
    Conv2dParams params;
  } cases[] = {
      {{3, 2, 9, 9}, {5, 2, 3, 3}, {1, 1, 1, 1}},
      {{7, 3, 6, 5}, {11, 3, 1, 1}, {2, 2, 0, 0}},
      {{2, 2, 5, 5}, {3, 2, 3, 3}, {1, 1, 1, 1}},
      {{2, 2, 4, 4}, {20, 2, 3, 3}, {2, 2, 1, 1}},
  };
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& c : cases) {
      const Tensor x = to_channels_last(random_tensor(c.x, dtype, generator));
      const Tensor w = Tensor::zeros(c.w, dtype);
      const Tensor b = random_tensor({c.w[0]}, dtype, generator);
      const std::string what = std::string("bias ") + dtype_name(dtype) + " x " + shape_str(c.x) +
                               " w " + shape_str(c.w);
      const Tensor y =
          to_host(conv2d_forward(to_cuda(x), to_cuda(w), to_cuda(b), c.params, Layout::nhwc));
      const std::vector<float> bias = b.to_floats(), values = y.to_floats();
      int wrong = 0;
      for (std::int64_t i = 0; i < y.numel(); ++i)
        wrong += values[static_cast<std::size_t>(i)] != bias[static_cast<std::size_t>(i % c.w[0])];
      BOOST_TEST(wrong == 0, what << ": " << wrong << " values are not their channel's bias");
    }
  }
}

// After a warm-up step (which settles cuDNN's algorithms), the channels-last forward and
// backward, with their filter copies, transposing add and bias kernels, capture into a CUDA
// graph whose replay gives the eager step's bits.
BOOST_AUTO_TEST_CASE(a_captured_step_replays_like_an_eager_one) {
  Generator generator(94);
  const Device device = Device::cuda(0);
  const Conv2dParams params{1, 1, 1, 1};
  const DType dtype = DType::f16;
  // x [N, H, W, C] = [2, 6, 5, 5], y [2, 6, 5, 3].
  const Tensor x = to_cuda(random_tensor({2, 6, 5, 5}, dtype, generator));
  const Tensor w = to_cuda(random_tensor({3, 5, 3, 3}, dtype, generator));
  const Tensor b = to_cuda(random_tensor({3}, dtype, generator));
  const Tensor dy = to_cuda(random_tensor({2, 6, 5, 3}, dtype, generator));
  const Tensor dw0 = random_tensor({3, 5, 3, 3}, DType::f32, generator);
  const Tensor db0 = random_tensor({3}, DType::f32, generator);
  Tensor dw_eager = to_cuda(dw0), db_eager = to_cuda(db0);
  const Tensor y_eager = conv2d_forward(x, w, b, params, Layout::nhwc);
  const Tensor dx_eager =
      conv2d_backward(x, w, dy, dw_eager, db_eager, params, true, Layout::nhwc).dx;

  Tensor dw = to_cuda(dw0), db = to_cuda(db0), y, dx;
  const std::unique_ptr<CapturedWork> graph = capture_cuda_work(device, [&] {
    y = conv2d_forward(x, w, b, params, Layout::nhwc);
    dx = conv2d_backward(x, w, dy, dw, db, params, true, Layout::nhwc).dx;
  });
  check_gpu_equal(dw, dw0, "dw, captured and not yet run");
  graph->replay();
  check_gpu_equal(y, to_host(y_eager), "y replayed");
  check_gpu_equal(dx, to_host(dx_eager), "dx replayed");
  check_gpu_equal(dw, to_host(dw_eager), "dw replayed");
  check_gpu_equal(db, to_host(db_eager), "db replayed");
}

#ifdef ALLOY_HAVE_CUDA
BOOST_AUTO_TEST_CASE(a_layout_is_its_own_plan) {
  Generator generator(93);
  const Tensor x = random_tensor({2, 3, 7, 7}, DType::f16, generator);
  const Tensor w = to_cuda(random_tensor({4, 3, 3, 3}, DType::f16, generator));
  conv2d_forward(to_cuda(x), w, Tensor(), {1, 1, 1, 1});
  const int plans = cuda::conv2d_plan_count(Device::cuda(0));
  conv2d_forward(to_cuda(to_channels_last(x)), w, Tensor(), {1, 1, 1, 1}, Layout::nhwc);
  BOOST_CHECK_EQUAL(cuda::conv2d_plan_count(Device::cuda(0)), plans + 1);
  const std::string report = cuda::conv2d_algorithm_report(Device::cuda(0));
  BOOST_TEST(report.find("f16 x [2, 3, 7, 7] with 4 filters 3x3, stride 1x1, padding 1x1, "
                         "channels-last") != std::string::npos,
             report);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
