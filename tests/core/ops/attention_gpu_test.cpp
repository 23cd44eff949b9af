// CUDA causal self-attention against the CPU kernels: forward (y, lse) and backward at f32,
// f16 and bf16, for sequences shorter than, equal to and longer than a tile, head sizes below a
// warp, of a warp, padded to a tile and of the kernels' largest (128); a second run repeats bit
// for bit. Sizes stay small: the emulator runs every thread.
//
// f32 runs in fp32 arithmetic, so it matches the CPU to fp32 rounding. The half kernels round the
// probabilities and score gradients to the half type before their tensor-core products (the CPU
// keeps them fp32), so their error grows with the sum of |terms|, not with the result, which may
// cancel: y is checked against the half type's tolerance times sum_j p_tj |v_j| (the forward of
// qkv with |v|), dqkv against it times the largest |element| of each of dq, dk and dv.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/attention.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// qkv with its v columns made positive: the forward gives sum_j p_tj |v_j|, same p.
Tensor with_abs_values(const Tensor& qkv, std::int64_t width) {
  std::vector<float> values = qkv.to_floats();
  for (std::size_t i = 0; i < values.size(); ++i)
    if (static_cast<std::int64_t>(i) % (3 * width) >= 2 * width) values[i] = std::fabs(values[i]);
  return Tensor::from_floats(qkv.shape(), values);
}

// Each element of dqkv replaced by the largest |element| of its part (dq, dk or dv).
Tensor part_maxima(const Tensor& dqkv, std::int64_t width) {
  std::vector<float> values = dqkv.to_floats();
  float largest[3] = {0.0f, 0.0f, 0.0f};
  for (std::size_t i = 0; i < values.size(); ++i) {
    float& part = largest[static_cast<std::int64_t>(i) % (3 * width) / width];
    part = std::max(part, std::fabs(values[i]));
  }
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = largest[static_cast<std::int64_t>(i) % (3 * width) / width];
  return Tensor::from_floats(dqkv.shape(), values);
}

// The device's y (from qkv) and dqkv (from the CPU's y and lse) against the CPU's.
void check_against_cpu(const Tensor& y, const Tensor& dqkv, const Tensor& cpu_y,
                       const Tensor& cpu_dqkv, const Tensor& qkv, std::int64_t heads,
                       const AttentionDropout* dropout, const std::string& what) {
  const DType dtype = qkv.dtype();
  const double tolerance = gpu_tolerance(dtype);
  if (dtype == DType::f32) {
    check_gpu_close(y, cpu_y, "y " + what, tolerance, 1e-5);
    check_gpu_close(dqkv, cpu_dqkv, "dqkv " + what, tolerance, 1e-4);
    return;
  }
  const std::int64_t width = qkv.dim(2) / 3;
  const Tensor magnitude = attention_forward(with_abs_values(qkv, width), heads, true, dropout).y;
  check_gpu_close_to_magnitude(y, cpu_y, magnitude, "y " + what, tolerance, 1e-5, tolerance);
  check_gpu_close_to_magnitude(dqkv, cpu_dqkv, part_maxima(cpu_dqkv, width), "dqkv " + what,
                               tolerance, 1e-4, tolerance);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_gpu)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_the_cpu_and_repeat_bit_for_bit) {
  Generator generator(17);
  const AttentionGeometry cases[] = {{2, 1, 2, 32},  {1, 33, 2, 16}, {1, 17, 1, 128},
                                     {2, 40, 1, 40}, {1, 65, 2, 64}, {1, 130, 1, 64}};
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const AttentionGeometry& g : cases) {
      const std::string what = std::string(dtype_name(dtype)) + " T" + std::to_string(g.time) +
                               " H" + std::to_string(g.heads) + " D" + std::to_string(g.head_dim);
      const Tensor qkv =
          random_tensor({g.batch, g.time, 3 * g.heads * g.head_dim}, dtype, generator, -1.5f, 1.5f);
      const Tensor dy = random_tensor({g.batch, g.time, g.heads * g.head_dim}, dtype, generator);
      const AttentionResult cpu = attention_forward(qkv, g.heads);
      const Tensor dqkv = attention_backward(dy, qkv, cpu.y, cpu.lse, g.heads);

      const Tensor qkv_gpu = to_cuda(qkv), dy_gpu = to_cuda(dy);
      AttentionResult gpu[2];
      Tensor dqkv_gpu[2];
      for (int run = 0; run < 2; ++run) {
        gpu[run] = attention_forward(qkv_gpu, g.heads);
        dqkv_gpu[run] = attention_backward(dy_gpu, qkv_gpu, gpu[run].y, gpu[run].lse, g.heads);
      }
      // Against the CPU's y, so that both backwards see the same delta.
      const Tensor dqkv_from_cpu_y =
          attention_backward(dy_gpu, qkv_gpu, to_cuda(cpu.y), to_cuda(cpu.lse), g.heads);
      check_against_cpu(gpu[0].y, dqkv_from_cpu_y, cpu.y, dqkv, qkv, g.heads, nullptr, what);
      check_gpu_close(gpu[0].lse, cpu.lse, "lse " + what, 1e-5, 1e-5);
      check_gpu_equal(gpu[1].y, to_host(gpu[0].y), "y again " + what);
      check_gpu_equal(gpu[1].lse, to_host(gpu[0].lse), "lse again " + what);
      check_gpu_equal(dqkv_gpu[1], to_host(dqkv_gpu[0]), "dqkv again " + what);
      const AttentionResult eval = attention_forward(qkv_gpu, g.heads, false);
      BOOST_TEST(!eval.lse.defined());
      check_gpu_equal(eval.y, to_host(gpu[0].y), "eval y " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(dropout_matches_the_cpu) {
  Generator generator(18);
  const AttentionGeometry g{2, 37, 2, 32};
  Tensor step = Tensor::zeros({2}, DType::i32);
  step.data<std::int32_t>()[0] = 5;
  const DropoutMask mask = make_dropout_mask("test", 0.2f, 4242, 1, 2);
  const AttentionDropout cpu_dropout{mask, step};
  const AttentionDropout gpu_dropout{mask, to_cuda(step)};
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::string what = dtype_name(dtype);
    const Tensor qkv =
        random_tensor({g.batch, g.time, 3 * g.heads * g.head_dim}, dtype, generator, -1.5f, 1.5f);
    const Tensor dy = random_tensor({g.batch, g.time, g.heads * g.head_dim}, dtype, generator);
    const AttentionResult cpu = attention_forward(qkv, g.heads, true, &cpu_dropout);
    const Tensor dqkv = attention_backward(dy, qkv, cpu.y, cpu.lse, g.heads, &cpu_dropout);
    const AttentionResult gpu = attention_forward(to_cuda(qkv), g.heads, true, &gpu_dropout);
    const Tensor dqkv_gpu = attention_backward(to_cuda(dy), to_cuda(qkv), to_cuda(cpu.y),
                                               to_cuda(cpu.lse), g.heads, &gpu_dropout);
    check_against_cpu(gpu.y, dqkv_gpu, cpu.y, dqkv, qkv, g.heads, &cpu_dropout, what);
  }
}

BOOST_AUTO_TEST_SUITE_END()
