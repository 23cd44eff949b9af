// The CUDA dropout against the CPU op bit for bit (masks and values, every dtype, forward and
// backward, split rows); the step count read from device memory when the kernel runs, eagerly
// and in a replayed CUDA graph.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops/dropout.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Tensor step_count(int step) {
  return Tensor::from_floats({2}, {static_cast<float>(step), 0.0f}, DType::i32);
}

// Positions that differ between two host tensors' values.
std::int64_t differing(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_floats(), y = b.to_floats();
  std::int64_t count = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    count += x[i] != y[i];
  return count;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dropout_gpu)

BOOST_AUTO_TEST_CASE(matches_the_cpu_bit_for_bit) {
  Generator generator(51);
  for (const DType dtype : kFloatTypes) {
    // Rows of 40 columns move 4 elements per load and store; the others one by one.
    for (const Shape& shape : {Shape{5, 3, 7}, Shape{24, 130}, Shape{1, 1}, Shape{6, 40}}) {
      const Tensor x = random_tensor(shape, dtype, generator, -4.0f, 4.0f);
      const Tensor dy = random_tensor(shape, dtype, generator, -4.0f, 4.0f);
      const DropoutMask mask = make_dropout_mask("test", 0.3f, generator.next_u64(), 3, 2);
      const std::string what = std::string(dtype_name(dtype)) + " " + x.str();
      check_gpu_equal(dropout_forward(to_cuda(x), mask, to_cuda(step_count(9))),
                      dropout_forward(x, mask, step_count(9)), "forward " + what);
      check_gpu_equal(dropout_backward(to_cuda(dy), mask, to_cuda(step_count(9))),
                      dropout_backward(dy, mask, step_count(9)), "backward " + what);
    }
  }
}

// Same launch arguments, another count in device memory: another mask, the CPU's at that count.
BOOST_AUTO_TEST_CASE(reads_the_step_count_from_device_memory) {
  Generator generator(52);
  const Tensor x = random_tensor({16, 40}, DType::f32, generator, 0.5f, 1.0f);
  const Tensor gpu_x = to_cuda(x);
  const DropoutMask mask = make_dropout_mask("test", 0.5f, 77, 0, 1);
  Tensor step = to_cuda(step_count(1));
  const Tensor first = to_host(dropout_forward(gpu_x, mask, step));
  step.copy_from(step_count(2));
  const Tensor second = dropout_forward(gpu_x, mask, step);
  check_gpu_equal(second, dropout_forward(x, mask, step_count(2)), "at count 2");
  BOOST_TEST(differing(to_host(second), first) > 200);
}

BOOST_AUTO_TEST_CASE(a_captured_launch_replayed_after_the_count_changed_draws_the_new_mask) {
  Generator generator(53);
  const Device device = Device::cuda(0);
  const Tensor x = random_tensor({8, 33}, DType::f16, generator, 0.5f, 1.0f);
  const Tensor gpu_x = to_cuda(x);
  const DropoutMask mask = make_dropout_mask("test", 0.4f, 5, 1, 3);
  Tensor step = to_cuda(step_count(10));
  Tensor y;
  const std::unique_ptr<CapturedWork> graph =
      capture_cuda_work(device, [&] { y = dropout_forward(gpu_x, mask, step); });
  for (const int count : {10, 11, 4000}) {
    step.copy_from(step_count(count));
    graph->replay();
    check_gpu_equal(y, dropout_forward(x, mask, step_count(count)),
                    "replayed at count " + std::to_string(count));
  }
}

BOOST_AUTO_TEST_CASE(a_step_count_on_another_device_is_an_error) {
  const Tensor x = to_cuda(Tensor::from_floats({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}));
  BOOST_CHECK_EXCEPTION(dropout_forward(x, make_dropout_mask("test", 0.5f, 1, 0, 1), step_count(0)),
                        Error, [](const Error& e) {
                          return std::string(e.what()).find("different devices") !=
                                 std::string::npos;
                        });
}

BOOST_AUTO_TEST_SUITE_END()
