// Activation recomputation on CUDA (tests/core/nn/recompute.h): the same bits as keeping the
// activations, with cuDNN and cuBLAS running each recomputed forward twice.
#include <boost/test/unit_test.hpp>

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

BOOST_AUTO_TEST_SUITE_END()
