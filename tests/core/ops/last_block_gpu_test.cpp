// The grid reductions' arrival counters (core/ops/cuda/last_block.h) are created and zeroed by
// eager work, never inside a CUDA-graph capture: there the zeroing would only be recorded, and a
// capture that then failed would leave garbage counters to the eager step after it. A first
// request inside a capture fails the capture, naming why; eager work then creates them and a
// capture after that works. Its own executable, so that nothing has created the counters before.
#include <boost/test/unit_test.hpp>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/ops/softmax_cross_entropy.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(last_block_gpu)

#ifdef ALLOY_HAVE_CUDA

BOOST_AUTO_TEST_CASE(the_counters_are_created_by_eager_work_not_in_a_capture) {
  const Device device = Device::cuda(0);
  Generator generator(43);
  const Tensor logits = random_tensor({300, 10}, DType::f32, generator, -8.0f, 8.0f);
  const Tensor labels = random_labels(300, 10, generator);
  const Tensor logits_gpu = to_cuda(logits);
  const Tensor labels_gpu = to_cuda(labels);
  Tensor loss = Tensor::empty({1}, DType::f32, device);
  const auto work = [&] {
    loss.copy_from(softmax_cross_entropy_forward(logits_gpu, labels_gpu).loss);
  };

  BOOST_CHECK_EXCEPTION(capture_cuda_work(device, work), Error, [](const Error& error) {
    const std::string message = error.what();
    BOOST_TEST_MESSAGE(message);
    return message.find("arrival counters") != std::string::npos &&
           message.find("capture") != std::string::npos;
  });

  const Tensor expected = softmax_cross_entropy_forward(logits, labels).loss;
  work();  // eager: creates and zeroes the counters
  check_gpu_close(loss, expected, "eager loss after the refused capture", 1e-5, 0.0);
  const std::unique_ptr<CapturedWork> graph = capture_cuda_work(device, work);
  loss.fill(0.0f);
  graph->replay();
  check_gpu_close(loss, expected, "replayed loss", 1e-5, 0.0);
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
