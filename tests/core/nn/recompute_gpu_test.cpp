// Activation recomputation on CUDA (tests/core/nn/recompute.h): the same bits as keeping the
// activations, with cuDNN and cuBLAS running each recomputed forward twice.
#include <boost/test/unit_test.hpp>
#include <string>

#include "tests/core/nn/recompute.h"
#include "tests/support/gpu.h"

using namespace alloy;

BOOST_AUTO_TEST_SUITE(recompute_gpu)

BOOST_AUTO_TEST_CASE(recomputed_blocks_change_no_bit_at_every_level) {
  for (const test::AccumulationLevel& level : test::kAccumulationLevels)
    test::check_recompute_changes_no_bit(level, Device::cuda(0), test::to_cuda);
}

BOOST_AUTO_TEST_CASE(recomputed_residual_blocks_change_no_bit_at_every_level) {
  for (const test::AccumulationLevel& level : test::kAccumulationLevels)
    test::check_recompute_changes_no_bit(level, Device::cuda(0), test::to_cuda,
                                         test::residual_recompute_net());
}

// O0 and O2 (f32 and f16 activations) keep the emulator's time down.
BOOST_AUTO_TEST_CASE(recomputed_dropout_draws_the_same_masks) {
  for (const test::AccumulationLevel& level : test::kAccumulationLevels) {
    if (std::string(level.name) == "O0" || std::string(level.name) == "O2")
      test::check_recompute_changes_no_bit(level, Device::cuda(0), test::to_cuda,
                                           test::conv_recompute_net(0.5f));
  }
}

BOOST_AUTO_TEST_SUITE_END()
