// A net with a layout region run channels-last on CUDA (cuDNN's NHWC convolutions with KRSC
// filters, the NHWC batch norm, pooling and permute kernels) against the same net run NCHW on
// the CPU: outputs, parameter gradients and running statistics agree within the tolerance of
// fp32 summation order, in f32 and in f16 with fp32 batch norm (O2's model).
#include <boost/test/unit_test.hpp>

#include "core/nn/cast_policy.h"
#include "tests/core/nn/layout_nets.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(layout_boundary_gpu)

BOOST_AUTO_TEST_CASE(a_net_run_channels_last_on_cuda_matches_it_run_nchw_on_the_cpu) {
  for (DType dtype : {DType::f32, DType::f16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      Generator generator(21);
      const Tensor x = random_tensor({4, 3, 8, 8}, dtype, generator);
      const Tensor dy = random_tensor({4, 5}, dtype, generator);
      auto cpu = layout_net(9);
      auto gpu = layout_net(9);
      gpu->to_device(Device::cuda(0));
      gpu->set_layout(Layout::nhwc);
      if (dtype != DType::f32) {
        cpu->cast_parameters(dtype, /*keep_norm_fp32=*/true);
        gpu->cast_parameters(dtype, /*keep_norm_fp32=*/true);
      }
      const Run expected = run_step(*cpu, x, dy);
      const Run actual = run_step(*gpu, to_cuda(x), to_cuda(dy));
      // Half results pass through a dozen roundings on two summation orders.
      const double rtol = dtype == DType::f32 ? 1e-4 : 2e-2;
      const double atol = dtype == DType::f32 ? 1e-4 : 2e-2;
      check_gpu_close(actual.y, expected.y, "y", rtol, atol);
      BOOST_TEST_REQUIRE(actual.grads.size() == expected.grads.size());
      for (std::size_t i = 0; i < expected.grads.size(); ++i)
        check_gpu_close(actual.grads[i], expected.grads[i], cpu->parameters()[i]->name, rtol, atol);
      for (std::size_t i = 0; i < expected.buffers.size(); ++i)
        check_gpu_close(actual.buffers[i], expected.buffers[i], cpu->buffers()[i]->name, rtol,
                        atol);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
