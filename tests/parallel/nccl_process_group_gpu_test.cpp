// The NCCL process group at world size 1 on one GPU (ranks of a bigger world need a GPU each):
// every collective runs through NCCL and leaves the values as they are, the one rank being the
// whole world; f32 averages, half sums, broadcast, allgather and barrier. Skipped (exit 77)
// without a usable CUDA device.
#include <boost/test/unit_test.hpp>

#include "tests/parallel/forked.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "parallel/nccl_process_group.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(nccl_process_group_gpu)

#ifdef ALLOY_HAVE_CUDA

BOOST_AUTO_TEST_CASE(world_size_1_collectives_keep_the_values) {
  parallel::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);
  parallel::NcclProcessGroup group(0, 1, "127.0.0.1", free_port(), Device::cuda(0), options);
  BOOST_TEST(group.rank() == 0);
  BOOST_TEST(group.size() == 1);
  const Tensor ones = to_cuda(Tensor::from_floats({2}, {1.0f, 2.0f}));
  group.allreduce_sum(ones);
  BOOST_TEST(to_host(ones).to_floats() == (std::vector<float>{1.0f, 2.0f}),
             boost::test_tools::per_element());
  group.allreduce_average(ones);
  BOOST_TEST(to_host(ones).to_floats() == (std::vector<float>{1.0f, 2.0f}),
             boost::test_tools::per_element());
  for (const DType dtype : {DType::f16, DType::bf16}) {
    const Tensor half = to_cuda(Tensor::from_floats({3}, {0.5f, -3.0f, 1024.0f}, dtype));
    group.allreduce_half_sum(half);
    BOOST_TEST(to_host(half).to_floats() == (std::vector<float>{0.5f, -3.0f, 1024.0f}),
               boost::test_tools::per_element());
  }
  const Tensor weights = to_cuda(Tensor::from_floats({3}, {7.0f, 8.0f, 9.0f}));
  group.broadcast(weights, 0);
  BOOST_TEST(to_host(weights).to_floats() == (std::vector<float>{7.0f, 8.0f, 9.0f}),
             boost::test_tools::per_element());
  BOOST_TEST(group.allgather_bytes("digest") == (std::vector<std::string>{"digest"}),
             boost::test_tools::per_element());
  group.barrier();
}

BOOST_AUTO_TEST_CASE(a_cpu_tensor_is_refused_with_a_clear_error) {
  parallel::NcclProcessGroup group(0, 1, "127.0.0.1", free_port(), Device::cuda(0));
  BOOST_CHECK_EXCEPTION(
      group.allreduce_sum(Tensor::from_floats({1}, {1.0f})), Error, [](const Error& error) {
        return std::string(error.what()).find("the tensor is on cpu") != std::string::npos;
      });
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
