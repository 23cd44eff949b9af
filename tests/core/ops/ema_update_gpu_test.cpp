// The CUDA weights' EMA against the CPU op bit for bit (the contract of core/ops/ema_update.h:
// the same float operations, fused the same way): f32, f16 and bf16 values over more tensors
// than one launch holds, tensors of several blocks and one whose blocks stride over it; skip
// read on the device (1 and NaN change nothing, 0 updates); one call captured in a CUDA graph
// replays as eager calls do and reads skip and the values at each replay; device mismatches.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops/ema_update.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// The same pairs on the host and on the device.
struct Twin {
  std::vector<Tensor> cpu_average, cpu_value, gpu_average, gpu_value;

  void add(const Tensor& average, const Tensor& value) {
    cpu_average.push_back(average.clone());
    cpu_value.push_back(value);
    gpu_average.push_back(to_cuda(average));
    gpu_value.push_back(to_cuda(value));
  }
  static std::vector<EmaTensors> list(std::vector<Tensor>& averages,
                                      const std::vector<Tensor>& values) {
    std::vector<EmaTensors> out;
    for (std::size_t i = 0; i < averages.size(); ++i)
      out.push_back({&averages[i], &values[i]});
    return out;
  }
  std::vector<EmaTensors> cpu_list() { return list(cpu_average, cpu_value); }
  std::vector<EmaTensors> gpu_list() { return list(gpu_average, gpu_value); }
  void update(float decay) {
    ema_update(cpu_list(), decay);
    ema_update(gpu_list(), decay);
  }
};

// 70 pairs (two launches of at most 64) from one element to several blocks, one empty.
Twin mixed(Generator& generator) {
  Twin twin;
  for (int i = 0; i < 70; ++i) {
    const std::int64_t size = i == 5 ? 20000 : i == 40 ? 9001 : i == 66 ? 0 : 1 + 23 * i;
    twin.add(random_tensor({size}, DType::f32, generator, -2.0f, 2.0f),
             random_tensor({size}, kFloatTypes[i % 3], generator, -3.0f, 3.0f));
  }
  return twin;
}

std::vector<std::uint32_t> bits_of(const Tensor& f32) {
  const Tensor host = to_host(f32);
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(host.numel()));
  if (!bits.empty()) std::memcpy(bits.data(), host.data<float>(), bits.size() * sizeof(float));
  return bits;
}

// Every average in `actual` (on any device) has the bits of the one in `expected`.
void check_same_bits(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected,
                     const std::string& what) {
  for (std::size_t i = 0; i < actual.size(); ++i)
    BOOST_TEST(bits_of(actual[i]) == bits_of(expected[i]),
               what << ": average " << i << " (" << expected[i].str() << ")");
}

std::vector<Tensor> clones(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors)
    out.push_back(t.clone());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ema_update_gpu)

BOOST_AUTO_TEST_CASE(matches_the_cpu_bit_for_bit_over_two_launches) {
  Generator generator(41);
  Twin twin = mixed(generator);
  for (const float decay : {0.9999f, 0.99f, 0.5f, 0.3f, 0.0f}) {
    twin.update(decay);
    check_same_bits(twin.gpu_average, twin.cpu_average, "decay " + std::to_string(decay));
  }
}

// More than 1024 blocks' worth of elements: the tensor's blocks stride over it.
BOOST_AUTO_TEST_CASE(matches_the_cpu_on_tensors_larger_than_the_grid) {
  Generator generator(42);
  Twin twin;
  const std::int64_t size = 1024 * 1024 + 4097;
  for (const DType dtype : kFloatTypes)
    twin.add(random_tensor({size}, DType::f32, generator), random_tensor({size}, dtype, generator));
  twin.update(0.999f);
  check_same_bits(twin.gpu_average, twin.cpu_average, "strided");
}

BOOST_AUTO_TEST_CASE(a_nonzero_skip_on_the_device_changes_nothing) {
  Generator generator(43);
  Twin twin = mixed(generator);
  const std::vector<Tensor> before = clones(twin.cpu_average);
  for (const float flag : {1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    ema_update(twin.gpu_list(), 0.9f, to_cuda(Tensor::from_floats({1}, {flag})));
    check_same_bits(twin.gpu_average, before, "skip " + std::to_string(flag));
  }
  ema_update(twin.gpu_list(), 0.9f, to_cuda(Tensor::from_floats({1}, {0.0f})));
  ema_update(twin.cpu_list(), 0.9f);
  check_same_bits(twin.gpu_average, twin.cpu_average, "skip 0");
}

// Captured once, replayed: the same bits as eager calls; skip and the values are read at each
// replay, decay is the captured one.
BOOST_AUTO_TEST_CASE(a_captured_call_replays_like_eager_calls) {
  Generator generator(44);
  const Device device = Device::cuda(0);
  Twin twin = mixed(generator);
  std::vector<Tensor> eager = clones(twin.gpu_average);
  Tensor skip = to_cuda(Tensor::from_floats({1}, {0.0f}));
  const std::vector<Tensor> before = clones(twin.cpu_average);
  const std::unique_ptr<CapturedWork> graph =
      capture_cuda_work(device, [&] { ema_update(twin.gpu_list(), 0.95f, skip); });
  check_same_bits(twin.gpu_average, before, "captured, not run");
  for (int replay = 0; replay < 2; ++replay) {
    graph->replay();
    ema_update(Twin::list(eager, twin.gpu_value), 0.95f, skip);
    ema_update(twin.cpu_list(), 0.95f);
  }
  check_same_bits(twin.gpu_average, eager, "two replays against two eager calls");
  check_same_bits(twin.gpu_average, twin.cpu_average, "two replays against the cpu");
  const std::vector<Tensor> replayed = clones(twin.gpu_average);
  skip.copy_from(Tensor::from_floats({1}, {std::numeric_limits<float>::quiet_NaN()}));
  graph->replay();
  check_same_bits(twin.gpu_average, replayed, "a replay with skip NaN");
  skip.copy_from(Tensor::from_floats({1}, {0.0f}));
  for (std::size_t i = 0; i < twin.cpu_value.size(); ++i) {
    const Tensor& old = twin.cpu_value[i];
    twin.cpu_value[i] = random_tensor(old.shape(), old.dtype(), generator, -3.0f, 3.0f);
    twin.gpu_value[i].copy_from(twin.cpu_value[i]);
  }
  graph->replay();
  ema_update(twin.cpu_list(), 0.95f);
  check_same_bits(twin.gpu_average, twin.cpu_average, "a replay on new values");
}

// The warmed-up decay from the update count on the device: the CPU's bits, and a replay reads the
// count as it is then.
BOOST_AUTO_TEST_CASE(an_update_count_on_the_device_warms_the_decay_up_like_the_cpu) {
  Generator generator(45);
  const Device device = Device::cuda(0);
  Twin twin = mixed(generator);
  Tensor count = to_cuda(Tensor::from_floats({2}, {1.0f, 0.0f}, DType::i32));
  const std::unique_ptr<CapturedWork> graph =
      capture_cuda_work(device, [&] { ema_update(twin.gpu_list(), 0.999f, {}, count); });
  for (const float updates : {1.0f, 7.0f, 500.0f, 5000.0f}) {
    const Tensor host_count = Tensor::from_floats({2}, {updates, 0.0f}, DType::i32);
    count.copy_from(host_count);
    graph->replay();
    ema_update(twin.cpu_list(), 0.999f, {}, host_count);
    check_same_bits(twin.gpu_average, twin.cpu_average,
                    "replayed at count " + std::to_string(updates));
  }
}

BOOST_AUTO_TEST_CASE(tensors_on_different_devices_are_errors) {
  const auto fails_with = [](const std::string& part) {
    return [part](const Error& e) { return std::string(e.what()).find(part) != std::string::npos; };
  };
  const Tensor host = Tensor::from_floats({2}, {1.0f, 2.0f});
  Tensor average = to_cuda(host);
  const Tensor value = to_cuda(host);
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &host}}, 0.5f), Error,
                        fails_with("different devices"));
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}}, 0.5f, Tensor::from_floats({1}, {0.0f})),
                        Error, fails_with("skip flag"));
  Tensor host_average = host.clone();
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}, {&host_average, &host}}, 0.5f), Error,
                        fails_with("first pair"));
}

BOOST_AUTO_TEST_SUITE_END()
