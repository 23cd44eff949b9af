// Stochastic rounding in the CUDA optimizer updates (core/ops/optimizer_update.h with the
// hypers' `rounding`): fp16 and bf16 parameters without masters come out with the same bits as
// the CPU's update, step after step (the words are keyed by the step count read on the device,
// the parameter's index and the element), for SGD and AdamW; and they differ from
// round-to-nearest, so the rounding is really stochastic there. The learning rate is a power of
// two and SGD has no momentum or decay, so p - lr * g is exact to fp32 on both sides whether or
// not a compiler fuses it: any difference is the rounding's. (AdamW's fp32 values may differ by
// contraction; its check allows the one-ulp difference that can then make.)
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/optimizer_update.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

struct Side {
  std::vector<Tensor> value, grad, state0, state1;
  Tensor lr, step;
};

Side make_side(const std::vector<Tensor>& values, bool cuda) {
  Side side;
  for (const Tensor& v : values) {
    const Tensor zeros = Tensor::zeros(v.shape(), DType::f32);
    side.value.push_back(cuda ? to_cuda(v) : v.clone());
    side.state0.push_back(cuda ? to_cuda(zeros) : zeros.clone());
    side.state1.push_back(cuda ? to_cuda(zeros) : zeros.clone());
  }
  side.grad.resize(values.size());
  const Tensor lr = Tensor::from_floats({1}, {0x1p-6f});
  const Tensor step = Tensor::zeros({2}, DType::i32);
  side.lr = cuda ? to_cuda(lr) : lr.clone();
  side.step = cuda ? to_cuda(step) : step.clone();
  return side;
}

void update(Side& side, bool adam, const StochasticRounding& rounding) {
  if (adam) {
    AdamWHyper hyper;
    hyper.rounding = rounding;
    std::vector<AdamWTensors> list;
    for (std::size_t i = 0; i < side.value.size(); ++i) {
      list.push_back({&side.value[i], &side.grad[i], &side.state0[i], &side.state1[i], nullptr,
                      static_cast<std::uint32_t>(3 + i)});
    }
    adamw_update(list, hyper, side.lr, side.step);
  } else {
    SgdHyper hyper;
    hyper.rounding = rounding;
    std::vector<SgdTensors> list;
    for (std::size_t i = 0; i < side.value.size(); ++i)
      list.push_back(
          {&side.value[i], &side.grad[i], nullptr, nullptr, static_cast<std::uint32_t>(3 + i)});
    sgd_update(list, hyper, side.lr, side.step);
  }
}

// Elements whose bits differ between a device tensor and a host tensor.
std::int64_t differing(const Tensor& gpu, const Tensor& cpu) {
  const Tensor host = to_host(gpu);
  const auto* a = static_cast<const std::uint16_t*>(host.raw());
  const auto* b = static_cast<const std::uint16_t*>(cpu.raw());
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < cpu.numel(); ++i)
    count += a[i] != b[i];
  return count;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_update_rounding_gpu)

BOOST_AUTO_TEST_CASE(cuda_rounds_half_parameters_with_the_cpus_bits) {
  Generator generator(17);
  const StochasticRounding on{true, 0x5eed5eed12345678ull}, off{};
  for (const bool adam : {false, true}) {
    for (const DType dtype : {DType::f16, DType::bf16}) {
      // Sizes from one element to several blocks of the multi-tensor launch.
      std::vector<Tensor> values;
      for (const std::int64_t size : {1, 1000, 70001})
        values.push_back(random_tensor({size}, dtype, generator));
      Side cpu = make_side(values, false), gpu = make_side(values, true);
      Side nearest = make_side(values, false);
      const std::string what = std::string(adam ? "adamw " : "sgd ") + dtype_name(dtype);
      for (int step = 0; step < 3; ++step) {
        for (std::size_t i = 0; i < values.size(); ++i) {
          // Small gradients: most updates are below half an ulp, where rounding matters.
          cpu.grad[i] = random_tensor(values[i].shape(), dtype, generator, -0.05f, 0.05f);
          gpu.grad[i] = to_cuda(cpu.grad[i]);
          nearest.grad[i] = cpu.grad[i];
        }
        update(cpu, adam, on);
        update(gpu, adam, on);
        update(nearest, adam, off);
      }
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::string where = what + ", parameter " + std::to_string(i);
        if (adam) {
          // One ulp where the two sides' fp32 values differ by contraction.
          check_gpu_close(gpu.value[i], cpu.value[i], where, gpu_tolerance(dtype), 0.0);
        } else {
          BOOST_TEST(differing(gpu.value[i], cpu.value[i]) == 0, where);
        }
      }
      const Tensor& big = cpu.value.back();
      BOOST_TEST(differing(to_cuda(big), nearest.value.back()) > big.numel() / 10,
                 what << ": stochastic rounding must differ from rounding to nearest");
      BOOST_TEST(to_host(gpu.step).data<std::int32_t>()[0] == 3);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
