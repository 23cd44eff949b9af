// The CUDA gradient-norm clip against the CPU op on mixed sizes and dtypes (more tensors than
// one launch holds, so the last launch's last block combines every launch's partials), the same
// bits run after run, inf and NaN as on the CPU, one call captured in a CUDA graph and replayed
// (new gradient values, same addresses), the clip's coefficient fed to the fused update as on
// the CPU, and O2's unscale factor read on the device.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/ops/clip_grad_norm.h"
#include "core/ops/optimizer_update.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// 70 tensors (two launches of at most 64), from one element to several blocks; small enough
// for the emulator.
std::vector<Tensor> mixed_gradients(Generator& generator, float range) {
  std::vector<Tensor> grads;
  for (int i = 0; i < 70; ++i) {
    const std::int64_t size = i == 5 ? 20000 : i == 40 ? 9000 : 1 + 23 * i;
    grads.push_back(random_tensor({size}, kFloatTypes[i % 3], generator, -range, range));
  }
  return grads;
}

std::vector<const Tensor*> pointers(const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> out;
  for (const Tensor& t : tensors)
    out.push_back(&t);
  return out;
}

std::vector<Tensor> on_gpu(const std::vector<Tensor>& host) {
  std::vector<Tensor> out;
  for (const Tensor& t : host)
    out.push_back(to_cuda(t));
  return out;
}

// The outputs of one clip_grad_norm call on a device: norm, coefficient and tally.
struct Outputs {
  explicit Outputs(Device device)
      : norm(Tensor::zeros({1}, DType::f32, device)),
        coefficient(Tensor::zeros({1}, DType::f32, device)),
        tally(make_clip_tally(device)) {}
  float norm_value() const { return to_host(norm).data<float>()[0]; }
  float coefficient_value() const { return to_host(coefficient).data<float>()[0]; }
  Tensor norm, coefficient, tally;
};

void run(const std::vector<Tensor>& grads, float max_norm, Outputs& out) {
  clip_grad_norm(pointers(grads), max_norm, out.norm, out.coefficient, out.tally);
}

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(clip_grad_norm_gpu)

BOOST_AUTO_TEST_CASE(norm_coefficient_and_tally_match_the_cpu) {
  Generator generator(31);
  const std::vector<Tensor> host = mixed_gradients(generator, 2.0f);
  const std::vector<Tensor> device = on_gpu(host);
  Outputs cpu(Device::cpu()), gpu(Device::cuda(0));
  // Below the norm (clipped), then above it (coefficient 1).
  for (const float max_norm : {1.0f, 1e4f}) {
    run(host, max_norm, cpu);
    run(device, max_norm, gpu);
    const std::string what = "max_norm " + std::to_string(max_norm);
    check_gpu_close(gpu.norm, cpu.norm, what + " norm", 1e-6, 0.0);
    check_gpu_close(gpu.coefficient, cpu.coefficient, what + " coefficient", 1e-6, 0.0);
  }
  BOOST_TEST(cpu.coefficient_value() == 1.0f);
  BOOST_TEST(gpu.coefficient_value() == 1.0f);
  const ClipTally cpu_tally = read_clip_tally(cpu.tally);
  const ClipTally gpu_tally = read_clip_tally(gpu.tally);
  BOOST_TEST(gpu_tally.finite_steps == 2);
  BOOST_TEST(gpu_tally.clipped_steps == 1);
  BOOST_TEST(gpu_tally.norm_sum == cpu_tally.norm_sum, boost::test_tools::tolerance(1e-6));
  // No gradients at all: one empty launch still writes the results.
  Outputs empty(Device::cuda(0));
  run({}, 0.5f, empty);
  BOOST_TEST(empty.norm_value() == 0.0f);
  BOOST_TEST(empty.coefficient_value() == 1.0f);
}

// O2's half gradients, still scaled, with the inverse of the scale read on the device: as the
// CPU, and as the CUDA clip over fp32 copies of fl(g * unscale).
BOOST_AUTO_TEST_CASE(an_unscale_factor_matches_the_cpu_and_unscaled_copies) {
  Generator generator(33);
  const std::vector<Tensor> host = mixed_gradients(generator, 3000.0f);
  const float inverse = 1.0f / 1536.0f;
  std::vector<Tensor> unscaled;
  for (const Tensor& g : host)
    unscaled.push_back(multiplied(g, inverse));
  const Tensor unscale = Tensor::from_floats({1}, {inverse});
  const Tensor device_unscale = to_cuda(unscale);
  Outputs cpu(Device::cpu()), gpu(Device::cuda(0)), copies(Device::cuda(0));
  clip_grad_norm(pointers(host), 0.5f, cpu.norm, cpu.coefficient, cpu.tally, unscale);
  const std::vector<Tensor> device = on_gpu(host);
  clip_grad_norm(pointers(device), 0.5f, gpu.norm, gpu.coefficient, gpu.tally, device_unscale);
  run(on_gpu(unscaled), 0.5f, copies);
  check_gpu_close(gpu.norm, cpu.norm, "norm", 1e-6, 0.0);
  check_gpu_close(gpu.coefficient, cpu.coefficient, "coefficient", 1e-6, 0.0);
  BOOST_TEST(bits_of(gpu.norm_value()) == bits_of(copies.norm_value()));
  BOOST_TEST(bits_of(gpu.coefficient_value()) == bits_of(copies.coefficient_value()));
  BOOST_TEST(gpu.coefficient_value() < 1.0f);
}

BOOST_AUTO_TEST_CASE(the_same_bits_run_after_run) {
  Generator generator(32);
  const std::vector<Tensor> device = on_gpu(mixed_gradients(generator, 100.0f));
  Outputs first(Device::cuda(0)), again(Device::cuda(0));
  run(device, 3.0f, first);
  for (int i = 0; i < 3; ++i) {
    run(device, 3.0f, again);
    BOOST_TEST(bits_of(again.norm_value()) == bits_of(first.norm_value()), "run " << i);
    BOOST_TEST(bits_of(again.coefficient_value()) == bits_of(first.coefficient_value()));
  }
  const ClipTally tally = read_clip_tally(again.tally);
  BOOST_TEST(tally.finite_steps == 3);
  BOOST_TEST(tally.norm_sum == 3.0 * first.norm_value());  // exact: three equal floats
}

BOOST_AUTO_TEST_CASE(inf_and_nan_as_on_the_cpu) {
  Generator generator(33);
  std::vector<Tensor> host = mixed_gradients(generator, 1.0f);
  std::vector<float> values(100, 0.25f);
  values[7] = std::numeric_limits<float>::infinity();
  host.push_back(Tensor::from_floats({100}, values, DType::f16));
  Outputs gpu(Device::cuda(0));
  run(on_gpu(host), 1.0f, gpu);
  BOOST_TEST(std::isinf(gpu.norm_value()));
  BOOST_TEST(gpu.coefficient_value() == 0.0f);
  values[9] = std::numeric_limits<float>::quiet_NaN();
  host.back() = Tensor::from_floats({100}, values, DType::bf16);
  run(on_gpu(host), 1.0f, gpu);
  BOOST_TEST(std::isnan(gpu.norm_value()));
  BOOST_TEST(std::isnan(gpu.coefficient_value()));
  BOOST_TEST(read_clip_tally(gpu.tally).finite_steps == 0);
}

// One call captured and replayed: the replay reads the gradients and writes the results at
// their addresses, so new gradient values give the new norm; the tally counts each replay.
BOOST_AUTO_TEST_CASE(a_captured_call_replays_on_current_values) {
  Generator generator(34);
  const Device device = Device::cuda(0);
  std::vector<Tensor> grads = on_gpu(mixed_gradients(generator, 1.0f));
  Outputs gpu(device);
  run(grads, 0.5f, gpu);  // eager first: creates the arrival counter, as a warm-up step does
  const std::unique_ptr<CapturedWork> graph =
      capture_cuda_work(device, [&] { run(grads, 0.5f, gpu); });
  BOOST_TEST(read_clip_tally(gpu.tally).finite_steps == 1);  // captured, not run
  for (int replay = 0; replay < 2; ++replay) {
    const std::vector<Tensor> values = mixed_gradients(generator, replay == 0 ? 3.0f : 1e-4f);
    for (std::size_t i = 0; i < grads.size(); ++i)
      grads[i].copy_from(values[i]);
    Outputs cpu(Device::cpu());
    run(values, 0.5f, cpu);
    graph->replay();
    const std::string what = "replay " + std::to_string(replay);
    check_gpu_close(gpu.norm, cpu.norm, what + " norm", 1e-6, 0.0);
    check_gpu_close(gpu.coefficient, cpu.coefficient, what + " coefficient", 1e-6, 0.0);
  }
  const ClipTally tally = read_clip_tally(gpu.tally);
  BOOST_TEST(tally.finite_steps == 3);
  BOOST_TEST(tally.clipped_steps == 2);  // the eager call and the first replay
}

// The clip's coefficient, left on the device, scales the fused SGD update there as the CPU's
// does: the pair of calls a clipped amp step makes, on both backends.
BOOST_AUTO_TEST_CASE(the_coefficient_feeds_the_fused_update_as_on_the_cpu) {
  Generator generator(35);
  const std::vector<Tensor> grads = mixed_gradients(generator, 1.0f);
  std::vector<Tensor> cpu_params, gpu_params, cpu_momentum, gpu_momentum;
  for (const Tensor& g : grads) {
    cpu_params.push_back(random_tensor(g.shape(), DType::f32, generator));
    gpu_params.push_back(to_cuda(cpu_params.back()));
    cpu_momentum.push_back(Tensor::zeros(g.shape(), DType::f32));
    gpu_momentum.push_back(to_cuda(cpu_momentum.back()));
  }
  const std::vector<Tensor> gpu_grads = on_gpu(grads);
  Outputs cpu(Device::cpu()), gpu(Device::cuda(0));
  run(grads, 0.25f, cpu);
  run(gpu_grads, 0.25f, gpu);
  BOOST_TEST_REQUIRE(cpu.coefficient_value() < 1.0f);
  SgdHyper hyper;
  hyper.momentum = 0.9f;
  hyper.weight_decay = 1e-3f;
  const Tensor lr = Tensor::from_floats({1}, {0.1f});
  Tensor cpu_step = Tensor::zeros({2}, DType::i32);
  Tensor gpu_step = to_cuda(cpu_step);
  std::vector<SgdTensors> cpu_list, gpu_list;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    cpu_list.push_back({&cpu_params[i], &grads[i], &cpu_momentum[i]});
    gpu_list.push_back({&gpu_params[i], &gpu_grads[i], &gpu_momentum[i]});
  }
  sgd_update(cpu_list, hyper, lr, cpu_step, {}, cpu.coefficient);
  sgd_update(gpu_list, hyper, to_cuda(lr), gpu_step, {}, gpu.coefficient);
  for (std::size_t i = 0; i < grads.size(); ++i) {
    check_gpu_close(gpu_params[i], cpu_params[i], "parameter " + std::to_string(i),
                    gpu_tolerance(DType::f32), 1e-7);
  }
}

BOOST_AUTO_TEST_SUITE_END()
