// Gradients accumulate across backward passes on the CPU, in every op of LeNet, the MLP,
// ResNet-18 and a small batch-norm ResNet, at every opt level's dtypes
// (tests/core/nn/gradient_accumulation.h).
#include <boost/test/unit_test.hpp>

#include "core/thread_pool.h"
#include "tests/core/nn/gradient_accumulation.h"

using namespace alloy;

namespace {

Tensor on_host(const Tensor& tensor) {
  return tensor;
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(gradient_accumulation, TwoThreads)

BOOST_AUTO_TEST_CASE(two_backwards_add_their_gradients_at_every_level) {
  for (const char* model : {"mlp", "lenet", "small_resnet"}) {
    for (const test::AccumulationLevel& level : test::kAccumulationLevels)
      test::check_gradients_accumulate(model, level, Device::cpu(), 4, on_host);
  }
}

// ResNet-18's 3x3 stride-1 layers run as Winograd convolutions on the CPU.
BOOST_AUTO_TEST_CASE(resnet18_backwards_add_their_gradients) {
  for (const test::AccumulationLevel& level : test::kAccumulationLevels)
    test::check_gradients_accumulate("resnet18", level, Device::cpu(), 2, on_host);
}

BOOST_AUTO_TEST_SUITE_END()
