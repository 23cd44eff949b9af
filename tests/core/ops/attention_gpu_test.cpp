// CUDA causal self-attention against the CPU kernels: forward (y, lse) and backward at f32,
// f16 and bf16, for sequences shorter than, equal to and longer than a tile, head sizes below a
// warp, of a warp, padded to a tile and of the kernels' largest (128); a second run repeats bit
// for bit. Sizes stay small: the emulator runs every thread. The half kernels round their
// probabilities before the tensor cores' products: tests/support/attention_checks.h bounds them.
#include <boost/test/unit_test.hpp>

#include <string>

#include "core/ops/attention.h"
#include "tests/support/attention_checks.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// Alloy's own kernels, where --attention-kernel auto would take cuDNN's
// (attention_cudnn_gpu_test checks those).
struct AlloyKernels {
  AlloyKernels() { set_attention_kernel(AttentionKernel::alloy); }
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(AlloyKernels);

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
