// The CUDA step tally against its CPU twin: the same loss sum bit for bit, the same count.
#include <boost/test/unit_test.hpp>
#include <cstring>

#include "core/ops/softmax_cross_entropy.h"
#include "core/ops/step_tally.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(step_tally_gpu)

BOOST_AUTO_TEST_CASE(matches_the_cpu_bit_for_bit) {
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    Generator generator(21);
    const StepTally start{3.5, 4};
    Tensor cpu_tally = make_step_tally(Device::cpu(), start);
    Tensor gpu_tally = make_step_tally(Device::cuda(0), start);
    for (const std::int64_t rows : {256, 256, 96}) {
      const Tensor logits = random_tensor({rows, 10}, dtype, generator, -4.0f, 4.0f);
      const Tensor labels = random_labels(rows, 10, generator);
      // One loss for both, so only the tally's arithmetic is compared.
      const Tensor loss = softmax_cross_entropy_forward(logits, labels).loss;
      add_to_step_tally(cpu_tally, loss, logits, labels);
      add_to_step_tally(gpu_tally, to_cuda(loss), to_cuda(logits), to_cuda(labels));
    }
    const StepTally cpu = read_step_tally(cpu_tally);
    const StepTally gpu = read_step_tally(gpu_tally);
    BOOST_TEST(std::memcmp(&cpu.loss_sum, &gpu.loss_sum, sizeof(double)) == 0,
               dtype_name(dtype) << ": " << gpu.loss_sum << " vs " << cpu.loss_sum);
    BOOST_TEST(gpu.correct == cpu.correct, dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_SUITE_END()
