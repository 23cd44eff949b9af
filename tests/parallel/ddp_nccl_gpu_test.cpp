// DistributedDataParallel on a CUDA device at world size 1: device buckets on the plan the CPU
// path uses, copies and collective on the communication stream ordered by events. Over NCCL and
// over Gloo (staged through pinned memory), a world of one must hand every gradient back bit
// for bit (the average of one is itself; predivide and postdivide are 1), in fp32, in half, and
// in half reduced in fp32 — so a bucket offset or an ordering mistake shows as changed
// gradients. Skipped (exit 77) without a usable CUDA device.
#include <boost/test/unit_test.hpp>
#include <cstring>
#include <random>

#include "core/models/models.h"
#include "parallel/ddp.h"
#include "parallel/gloo_process_group.h"
#include "tests/parallel/forked.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "parallel/nccl_process_group.h"
#endif

using namespace alloy;
using namespace alloy::parallel;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(ddp_nccl_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

std::unique_ptr<nn::Module> make_lenet(Device device, DType dtype) {
  Generator generator(7);
  auto model = models::make_model("lenet", generator, 10);
  model->set_needs_input_grad(false);
  if (dtype != DType::f32) model->cast_parameters(dtype, true);
  model->to_device(device);
  return model;
}

void backward_once(nn::Module& model, Device device, DType dtype) {
  std::mt19937 generator(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> images(8 * 28 * 28);
  for (float& value : images)
    value = uniform(generator);
  std::vector<float> dlogits(8 * 10);
  for (float& value : dlogits)
    value = uniform(generator) / 8.0f;
  Tensor x = to_cuda(Tensor::from_floats({8, 1, 28, 28}, images, dtype));
  Tensor dy = to_cuda(Tensor::from_floats({8, 10}, dlogits, dtype));
  BOOST_TEST_REQUIRE((x.device() == device));
  model.forward(x);
  model.backward(dy);
}

std::vector<Tensor> host_gradients(nn::Module& model) {
  std::vector<Tensor> grads;
  for (const nn::Parameter* param : model.parameters())
    grads.push_back(to_host(param->grad));
  return grads;
}

// Runs one backward through DDP over `group` and checks the gradients came back unchanged and
// the device plan is the CPU model's.
void check_world_of_one(ProcessGroup& group, DType dtype, bool allreduce_fp32,
                        const std::string& what) {
  const Device device = Device::cuda(0);
  auto model = make_lenet(device, dtype);
  DdpOptions options;
  options.bucket_bytes = 8192;  // several buckets
  options.allreduce_fp32 = allreduce_fp32;
  DistributedDataParallel ddp(*model, group, options);
  ddp.broadcast_from_rank0();

  // One plan for both: the CPU model's buckets and layouts are the device model's.
  auto cpu_model = make_lenet(Device::cpu(), dtype);
  const BucketPlan cpu_plan =
      plan_buckets(gradient_slots(cpu_model->parameters()), options.bucket_bytes);
  BOOST_TEST_REQUIRE(ddp.plan().buckets.size() == cpu_plan.buckets.size(), what);
  BOOST_TEST(ddp.plan().buckets.size() >= 2u, what);
  for (std::size_t b = 0; b < cpu_plan.buckets.size(); ++b) {
    BOOST_TEST(ddp.plan().buckets[b].params == cpu_plan.buckets[b].params,
               boost::test_tools::per_element());
    BOOST_TEST(ddp.plan().layouts[b].offsets == cpu_plan.layouts[b].offsets,
               boost::test_tools::per_element());
    BOOST_TEST((ddp.bucket_buffers()[b].device() == device), what);
  }

  // The reference: a backward without reduction.
  {
    auto no_sync = ddp.no_sync();
    backward_once(*model, device, dtype);
  }
  const std::vector<Tensor> before = host_gradients(*model);
  const auto expect_unchanged = [&](const std::string& when) {
    const std::vector<Tensor> after = host_gradients(*model);
    BOOST_TEST_REQUIRE(after.size() == before.size());
    for (std::size_t i = 0; i < after.size(); ++i) {
      BOOST_TEST(std::memcmp(after[i].raw(), before[i].raw(), before[i].nbytes()) == 0,
                 what << ": gradient " << i << " changed " << when);
    }
  };
  // finish() with no gradient reported reduces every bucket as it stands.
  ddp.finish();
  expect_unchanged("when finish() forced every bucket");
  // Buckets started by the grad-ready hook during backward (LeNet's backward on the GPU is
  // deterministic: cuDNN's deterministic algorithms, pools without overlap), twice over the
  // same buckets and events.
  for (const char* step : {"in the first hooked step", "in the second hooked step"}) {
    for (nn::Parameter* param : model->parameters())
      param->grad = Tensor();
    backward_once(*model, device, dtype);
    ddp.finish();
    expect_unchanged(step);
  }
}

// no_sync on the device path (gradient accumulation): backwards inside it only accumulate, and
// the synced backward after them reduces the accumulated gradients, its buckets' copy-in
// ordered after every backward's kernels. At world size one, three backwards through DDP (two
// of them under no_sync) leave the bits of three backwards without DDP.
void check_accumulation_in_a_world_of_one(ProcessGroup& group, DType dtype,
                                          const std::string& what) {
  const Device device = Device::cuda(0);
  auto reference = make_lenet(device, dtype);
  reference->zero_grad();
  for (int i = 0; i < 3; ++i)
    backward_once(*reference, device, dtype);
  const std::vector<Tensor> want = host_gradients(*reference);

  auto model = make_lenet(device, dtype);
  DdpOptions options;
  options.bucket_bytes = 8192;  // several buckets
  DistributedDataParallel ddp(*model, group, options);
  model->zero_grad();
  {
    auto no_sync = ddp.no_sync();
    for (int i = 0; i < 2; ++i) {
      backward_once(*model, device, dtype);
      ddp.finish();  // does nothing inside no_sync
    }
  }
  backward_once(*model, device, dtype);
  ddp.finish();
  const std::vector<Tensor> got = host_gradients(*model);
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    BOOST_TEST(std::memcmp(got[i].raw(), want[i].raw(), want[i].nbytes()) == 0,
               what << ": gradient " << i << " is not the three backwards' sum");
  }
}

ProcessGroupOptions options_30s() {
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);
  return options;
}

}  // namespace

BOOST_AUTO_TEST_CASE(nccl_world_of_one_returns_every_gradient_bit_for_bit) {
  NcclProcessGroup group(0, 1, "127.0.0.1", free_port(), Device::cuda(0), options_30s());
  check_world_of_one(group, DType::f32, false, "nccl f32");
  check_world_of_one(group, DType::f16, false, "nccl f16 in half");
  check_world_of_one(group, DType::f16, true, "nccl f16 in fp32");
  check_world_of_one(group, DType::bf16, false, "nccl bf16 in half");
}

BOOST_AUTO_TEST_CASE(gloo_on_cuda_world_of_one_returns_every_gradient_bit_for_bit) {
  GlooProcessGroup group(0, 1, "127.0.0.1", free_port(), options_30s());
  check_world_of_one(group, DType::f32, false, "gloo f32");
  check_world_of_one(group, DType::f16, false, "gloo f16 in half");
  check_world_of_one(group, DType::f16, true, "gloo f16 in fp32");
}

BOOST_AUTO_TEST_CASE(no_sync_accumulates_and_the_next_backward_reduces_the_sum) {
  NcclProcessGroup nccl(0, 1, "127.0.0.1", free_port(), Device::cuda(0), options_30s());
  check_accumulation_in_a_world_of_one(nccl, DType::f32, "nccl f32");
  check_accumulation_in_a_world_of_one(nccl, DType::f16, "nccl f16");
  GlooProcessGroup gloo(0, 1, "127.0.0.1", free_port(), options_30s());
  check_accumulation_in_a_world_of_one(gloo, DType::f16, "gloo f16");
}

BOOST_AUTO_TEST_CASE(gloo_collectives_on_cuda_tensors_stage_through_the_host) {
  GlooProcessGroup group(0, 1, "127.0.0.1", free_port(), options_30s());
  const Tensor values = to_cuda(Tensor::from_floats({3}, {1.5f, -2.0f, 1024.0f}));
  group.allreduce_average(values);
  group.broadcast(values, 0);
  BOOST_TEST(to_host(values).to_floats() == (std::vector<float>{1.5f, -2.0f, 1024.0f}),
             boost::test_tools::per_element());
  const Tensor half = to_cuda(Tensor::from_floats({2}, {0.5f, -3.0f}, DType::bf16));
  group.allreduce_half_sum(half);
  BOOST_TEST(to_host(half).to_floats() == (std::vector<float>{0.5f, -3.0f}),
             boost::test_tools::per_element());
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
