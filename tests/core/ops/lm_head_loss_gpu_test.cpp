// The chunked tied head and loss on CUDA against the CPU: the loss tally, dh and the table's
// gradient, at f32 and f16 and with O1's fp32 table beside f16 h, in one chunk and in several,
// with a vocabulary in one of the CPU's blocks of table rows and in two.
#include <boost/test/unit_test.hpp>

#include "core/ops/lm_head_loss.h"
#include "core/ops/step_tally.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(lm_head_loss_gpu)

BOOST_AUTO_TEST_CASE(step_and_evaluation_match_the_cpu) {
  Generator generator(27);
  const std::int64_t rows = 19, channels = 24;
  struct Case {
    DType dtype, table;
    std::int64_t vocab;
  };
  for (const Case c : {Case{DType::f32, DType::f32, 37}, Case{DType::f16, DType::f16, 37},
                       Case{DType::f16, DType::f16, 2085}, Case{DType::f16, DType::f32, 2085}}) {
    const DType dtype = c.dtype;
    const std::int64_t vocab = c.vocab;
    for (const std::int64_t chunk : {std::int64_t{0}, std::int64_t{5}}) {
      const std::string what = std::string(dtype_name(dtype)) + " table " + dtype_name(c.table) +
                               " vocab " + std::to_string(vocab) + " chunk " +
                               std::to_string(chunk);
      const Tensor h = random_tensor({rows, channels}, dtype, generator);
      const Tensor wte = random_tensor({vocab, channels}, c.table, generator);
      const Tensor targets = random_labels(rows, vocab, generator);
      const Tensor dwte0 = random_tensor({vocab, channels}, DType::f32, generator);
      const Tensor scale = Tensor::from_floats({1}, {8.0f});
      Tensor tally = make_step_tally(Device::cpu());
      Tensor dwte = dwte0.clone();
      const Tensor dh = lm_head_loss_step(h, wte, targets, scale, tally, dwte, 0, chunk);

      Tensor tally_gpu = make_step_tally(Device::cuda(0));
      Tensor dwte_gpu = to_cuda(dwte0);
      const Tensor dh_gpu = lm_head_loss_step(to_cuda(h), to_cuda(wte), to_cuda(targets),
                                              to_cuda(scale), tally_gpu, dwte_gpu, 0, chunk);
      check_gpu_close(dh_gpu, dh, "dh " + what, gpu_tolerance(dtype), 1e-5);
      check_gpu_close(dwte_gpu, dwte, "dwte " + what, gpu_tolerance(DType::f32), 1e-5);
      const StepTally cpu_sums = read_step_tally(tally), gpu_sums = read_step_tally(tally_gpu);
      BOOST_TEST(gpu_sums.loss_sum == cpu_sums.loss_sum, boost::test_tools::tolerance(1e-5));
      BOOST_TEST(gpu_sums.correct == cpu_sums.correct);

      Tensor eval_gpu = make_step_tally(Device::cuda(0));
      lm_head_loss(to_cuda(h), to_cuda(wte), to_cuda(targets), eval_gpu, chunk);
      BOOST_TEST(read_step_tally(eval_gpu).loss_sum == gpu_sums.loss_sum);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
