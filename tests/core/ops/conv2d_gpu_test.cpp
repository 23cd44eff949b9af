// cuDNN convolution against the CPU convolution: forward with bias, backward data, filter and
// bias, in every dtype, with half-data/f32-accumulator (O1) weight gradients, and one plan per
// shape however often it runs.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/conv2d.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/ops/cuda/conv2d.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(conv2d_gpu)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_the_cpu) {
  Generator generator(71);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  struct Case {
    Shape x, w;
    Conv2dParams params;
  };
  const Case cases[] = {
      {{8, 1, 28, 28}, {6, 1, 5, 5}, {1, 1, 2, 2}},     // LeNet's first layer
      {{8, 6, 14, 14}, {16, 6, 5, 5}, {1, 1, 0, 0}},    // and its second
      {{4, 16, 15, 15}, {32, 16, 3, 3}, {2, 2, 1, 1}},  // a strided resnet layer
      // A 5x5 output, whose bias gradient reads one value at a time (the others' planes, four
      // or eight: core/ops/cuda/plane_vectors.cuh).
      {{6, 3, 7, 7}, {5, 3, 3, 3}, {1, 1, 0, 0}},
      // The real LeNet's first layer at batch 256: the bias gradient's 173k values per channel
      // take 43 chunks, merged by the grid's last block (the cases above take 1 or 2).
      {{256, 1, 28, 28}, {20, 1, 3, 3}, {1, 1, 0, 0}},
  };
  for (const DType dtype : types) {
    const double tol = gpu_tolerance(dtype);
    for (const Case& c : cases) {
      const double fan_in = static_cast<double>(c.w[1] * c.w[2] * c.w[3]);
      const double atol = (dtype == DType::f32 ? 1e-5 : tol) * std::sqrt(fan_in);
      const std::string what =
          std::string(dtype_name(dtype)) + " x " + shape_str(c.x) + " w " + shape_str(c.w);
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = random_tensor(c.w, dtype, generator, -0.2f, 0.2f);
      const Tensor b = random_tensor({c.w[0]}, dtype, generator);
      const Tensor y = conv2d_forward(x, w, b, c.params);
      // Each result's sum of |terms|: cuDNN's algorithm may transform the operands (Winograd,
      // FFT), with an error that grows with it rather than with the result.
      const Tensor y_magnitude = conv2d_forward(abs_f32(x), abs_f32(w), abs_f32(b), c.params);
      // The bias kernel adds the bias to the rounded convolution: one more rounding for half
      // outputs than the CPU's single one.
      check_gpu_close_to_magnitude(conv2d_forward(to_cuda(x), to_cuda(w), to_cuda(b), c.params), y,
                                   y_magnitude, "conv2d_forward " + what, 2 * tol, atol,
                                   magnitude_scale(dtype));

      const Tensor dy = random_tensor(y.shape(), dtype, generator);
      Tensor dw_magnitude = Tensor::zeros(c.w, DType::f32);
      Tensor db_magnitude = Tensor::zeros({c.w[0]}, DType::f32);
      const Tensor dx_magnitude = conv2d_backward(abs_f32(x), abs_f32(w), abs_f32(dy), dw_magnitude,
                                                  db_magnitude, c.params, true)
                                      .dx;
      for (const DType grad_type : {dtype, DType::f32}) {
        Tensor dw = random_tensor(c.w, grad_type, generator);
        Tensor db = random_tensor({c.w[0]}, grad_type, generator);
        Tensor dw_gpu = to_cuda(dw), db_gpu = to_cuda(db);
        const Conv2dGrads cpu = conv2d_backward(x, w, dy, dw, db, c.params, true);
        const Conv2dGrads gpu =
            conv2d_backward(to_cuda(x), to_cuda(w), to_cuda(dy), dw_gpu, db_gpu, c.params, true);
        const std::string grads = what + " with " + dtype_name(grad_type) + " accumulators";
        const double count = static_cast<double>(y.numel() / y.dim(1));
        const double grad_atol = (grad_type == DType::f32 ? 1e-5 : tol) * std::sqrt(count);
        // A sum over batch x plane accumulated in fp32 whatever the dtype (an f32 gradient of
        // half data comes from fp32 copies): the fp32 magnitude allowance; a half-data scale
        // over so many terms would let anything through.
        check_gpu_close_to_magnitude(dw_gpu, dw, dw_magnitude, "dw " + grads,
                                     gpu_tolerance(grad_type), grad_atol,
                                     magnitude_scale(DType::f32));
        check_gpu_close(db_gpu, db, "db " + grads, gpu_tolerance(grad_type), grad_atol);
        check_gpu_close_to_magnitude(gpu.dx, cpu.dx, dx_magnitude, "dx " + grads, tol, atol,
                                     magnitude_scale(dtype));
      }
    }
  }
}

// The bias alone: with zero weights the convolution is exactly zero, so y is the bias broadcast
// over every image and pixel, bit for bit, in every dtype (the bias kernel's indexing, whatever
// cuDNN's algorithm), for shapes whose planes, channels and batch all differ.
BOOST_AUTO_TEST_CASE(the_bias_lands_on_every_channel_in_every_dtype) {
  Generator generator(73);
  const struct {
    Shape x, w;
    Conv2dParams params;
  } cases[] = {
      {{3, 2, 9, 9}, {5, 2, 3, 3}, {1, 1, 1, 1}},
      {{7, 3, 6, 5}, {11, 3, 1, 1}, {2, 2, 0, 0}},
      // The kernel adds in 16-byte packs: 8x8 planes hold whole packs of every dtype, 9x9 and
      // 3x3 ones (above and here) have packs running into the next plane, the last into the
      // next image; 2x2 planes are narrower than a pack of halves, which go one by one.
      {{5, 2, 8, 8}, {3, 2, 3, 3}, {1, 1, 1, 1}},
      {{5, 2, 6, 6}, {3, 2, 3, 3}, {2, 2, 1, 1}},
      {{3, 2, 4, 4}, {5, 2, 3, 3}, {2, 2, 1, 1}},
  };
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const auto& c : cases) {
      const Tensor x = random_tensor(c.x, dtype, generator);
      const Tensor w = Tensor::zeros(c.w, dtype);
      const Tensor b = random_tensor({c.w[0]}, dtype, generator);
      const Tensor y = conv2d_forward(x, w, b, c.params);
      const std::string what = std::string("bias ") + dtype_name(dtype) + " x " + shape_str(c.x) +
                               " w " + shape_str(c.w);
      check_gpu_equal(conv2d_forward(to_cuda(x), to_cuda(w), to_cuda(b), c.params), y, what);
      // And what the CPU gives is the broadcast bias itself.
      const std::vector<float> bias = b.to_floats(), values = y.to_floats();
      const std::int64_t plane = y.dim(2) * y.dim(3);
      for (std::int64_t i = 0; i < y.numel(); ++i) {
        if (values[static_cast<std::size_t>(i)] !=
            bias[static_cast<std::size_t>((i / plane) % y.dim(1))]) {
          BOOST_ERROR(what << ": the CPU's y[" << i << "] is not its channel's bias");
          break;
        }
      }
    }
  }
}

#ifdef ALLOY_HAVE_CUDA
BOOST_AUTO_TEST_CASE(each_shape_is_planned_once) {
  Generator generator(72);
  const Tensor x = to_cuda(random_tensor({2, 3, 9, 9}, DType::f32, generator));
  const Tensor w = to_cuda(random_tensor({4, 3, 3, 3}, DType::f32, generator));
  conv2d_forward(x, w, Tensor(), {1, 1, 1, 1});
  const int plans = cuda::conv2d_plan_count(Device::cuda(0));
  for (int i = 0; i < 5; ++i)
    conv2d_forward(x, w, Tensor(), {1, 1, 1, 1});
  BOOST_CHECK_EQUAL(cuda::conv2d_plan_count(Device::cuda(0)), plans);
  conv2d_forward(x, w, Tensor(), {2, 2, 1, 1});
  BOOST_CHECK_EQUAL(cuda::conv2d_plan_count(Device::cuda(0)), plans + 1);
  // Which algorithm each direction of every shape above settled on (the log of a GPU run).
  const std::string report = cuda::conv2d_algorithm_report(Device::cuda(0));
  BOOST_TEST_MESSAGE("cuDNN algorithms chosen:\n" << report);
  BOOST_TEST(report.find("f32 x [2, 3, 9, 9] with 4 filters 3x3, stride 2x2") != std::string::npos,
             report);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
