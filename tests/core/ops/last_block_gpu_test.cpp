// The grid reductions' arrival counters (core/ops/cuda/last_block.h) are built and zeroed with
// the device's context, before any work: so a CUDA-graph capture may be the first work of a
// process, and its replay counts from zero (they used to be created by the first reduction, which
// a capture had to refuse, and which made the first level `alloy mem` measured report them as
// left allocated). Its own executable, so that nothing has run on the device before.
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

BOOST_AUTO_TEST_CASE(a_capture_may_be_the_first_work_of_a_process) {
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
  const Tensor expected = softmax_cross_entropy_forward(logits, labels).loss;

  const std::unique_ptr<CapturedWork> graph = capture_cuda_work(device, work);
  for (int replay = 0; replay < 2; ++replay) {
    loss.fill(0.0f);
    graph->replay();
    check_gpu_close(loss, expected, "replay " + std::to_string(replay), 1e-5, 0.0);
  }
  work();
  check_gpu_close(loss, expected, "eager loss after the replays", 1e-5, 0.0);
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
