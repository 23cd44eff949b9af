// Gradients accumulate across backward passes on CUDA (cuBLAS and cuDNN with beta 1, the
// project's kernels adding into the gradient), in every op of LeNet, the MLP and a small
// batch-norm ResNet, at every opt level's dtypes (tests/core/nn/gradient_accumulation.h).
#include <boost/test/unit_test.hpp>

#include "tests/core/nn/gradient_accumulation.h"
#include "tests/support/gpu.h"

using namespace alloy;

BOOST_AUTO_TEST_SUITE(gradient_accumulation_gpu)

BOOST_AUTO_TEST_CASE(two_backwards_add_their_gradients_at_every_level) {
  for (const char* model : {"mlp", "lenet", "small_resnet"}) {
    for (const test::AccumulationLevel& level : test::kAccumulationLevels) {
      test::check_gradients_accumulate(model, level, Device::cuda(0), 4, test::to_cuda);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
