// amp's CUDA kernels against their CPU twins: the multi-tensor unscale-and-check (more tensors
// than one launch holds, mixed dtypes, in place and into f32 masters, overflow naming the first
// bad tensor), O2's check-only pass with the inverse it leaves, the scaler's state machine and
// the fused master-to-model copy.
#include <boost/test/unit_test.hpp>

#include "amp/ops/master_copy.h"
#include "amp/ops/unscale.h"
#include "amp/ops/update_scale.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

struct Flags {
  Tensor scale, found_inf, first_overflow;
  explicit Flags(Device device, float scale_value) {
    scale = Tensor::from_floats({1}, {scale_value});
    found_inf = Tensor::zeros({1}, DType::f32);
    first_overflow = Tensor::zeros({1}, DType::i32);
    if (device.is_cuda()) {
      scale = to_cuda(scale);
      found_inf = to_cuda(found_inf);
      first_overflow = to_cuda(first_overflow);
    }
  }
};

std::int32_t first_of(const Tensor& first_overflow) {
  return to_host(first_overflow).data<std::int32_t>()[0];
}

amp::ScalerState make_state(Device device) {
  amp::ScalerState state;
  state.scale = Tensor::from_floats({1}, {512.0f});
  state.clean_steps = Tensor::zeros({1}, DType::i32);
  state.skipped_steps = Tensor::zeros({1}, DType::i32);
  state.at_min_streak = Tensor::zeros({1}, DType::i32);
  state.overflow_streak = Tensor::zeros({1}, DType::i32);
  state.found_inf = Tensor::zeros({1}, DType::f32);
  state.first_overflow = Tensor::zeros({1}, DType::i32);
  state.unreported_overflow = Tensor::zeros({1}, DType::i32);
  state.unreported_overflow.fill(-1.0f);
  if (device.is_cuda()) {
    for (Tensor* t : {&state.scale, &state.clean_steps, &state.skipped_steps, &state.at_min_streak,
                      &state.overflow_streak, &state.found_inf, &state.first_overflow,
                      &state.unreported_overflow}) {
      *t = to_cuda(*t);
    }
  }
  return state;
}

void check_states_equal(const amp::ScalerState& gpu, const amp::ScalerState& cpu,
                        const std::string& what) {
  check_gpu_equal(gpu.scale, cpu.scale, "scale " + what);
  check_gpu_equal(gpu.clean_steps, cpu.clean_steps, "clean_steps " + what);
  check_gpu_equal(gpu.skipped_steps, cpu.skipped_steps, "skipped_steps " + what);
  check_gpu_equal(gpu.at_min_streak, cpu.at_min_streak, "at_min_streak " + what);
  check_gpu_equal(gpu.overflow_streak, cpu.overflow_streak, "overflow_streak " + what);
  check_gpu_equal(gpu.found_inf, cpu.found_inf, "found_inf " + what);
  check_gpu_equal(gpu.first_overflow, cpu.first_overflow, "first_overflow " + what);
  check_gpu_equal(gpu.unreported_overflow, cpu.unreported_overflow, "unreported_overflow " + what);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(amp_ops_gpu)

BOOST_AUTO_TEST_CASE(unscale_and_check_matches_the_cpu) {
  Generator generator(101);
  for (const int bad : {-1, 0, 70, 99}) {
    std::vector<Tensor> grads, outputs_cpu, outputs_gpu, grads_gpu;
    for (int i = 0; i < 100; ++i) {  // more than the 64 tensors of one launch
      const DType dtype = kFloatTypes[i % 3];
      Tensor grad = random_tensor({1 + (i * 37) % 3000}, dtype, generator, -6e4f, 6e4f);
      if (i == bad || (bad >= 0 && i == 99)) {
        std::vector<float> values = grad.to_floats();
        values[values.size() / 2] = i == bad ? INFINITY : NAN;
        grad.copy_from_floats(values);
      }
      grads.push_back(grad);
      grads_gpu.push_back(to_cuda(grad));
      // Even tensors unscale into f32 masters, odd ones in place.
      outputs_cpu.push_back(i % 2 == 0 ? Tensor::zeros(grad.shape(), DType::f32) : grad.clone());
      outputs_gpu.push_back(i % 2 == 0 ? to_cuda(outputs_cpu.back()) : grads_gpu.back());
    }
    std::vector<const Tensor*> in_cpu, in_gpu;
    std::vector<Tensor*> out_cpu, out_gpu;
    for (int i = 0; i < 100; ++i) {
      in_cpu.push_back(&grads[static_cast<std::size_t>(i)]);
      in_gpu.push_back(&grads_gpu[static_cast<std::size_t>(i)]);
      out_cpu.push_back(i % 2 == 0 ? &outputs_cpu[static_cast<std::size_t>(i)]
                                   : &grads[static_cast<std::size_t>(i)]);
      out_gpu.push_back(&outputs_gpu[static_cast<std::size_t>(i)]);
    }
    Flags cpu(Device::cpu(), 65536.0f), gpu(Device::cuda(0), 65536.0f);
    amp::unscale_and_check(in_cpu, out_cpu, cpu.scale, cpu.found_inf, cpu.first_overflow);
    amp::unscale_and_check(in_gpu, out_gpu, gpu.scale, gpu.found_inf, gpu.first_overflow);
    const std::string what = "overflow at " + std::to_string(bad);
    check_gpu_equal(gpu.found_inf, cpu.found_inf, "found_inf with " + what);
    BOOST_CHECK_EQUAL(first_of(gpu.first_overflow), first_of(cpu.first_overflow));
    BOOST_CHECK_EQUAL(first_of(gpu.first_overflow), bad);
    for (int i = 0; i < 100; ++i) {
      check_gpu_equal(*out_gpu[static_cast<std::size_t>(i)], *out_cpu[static_cast<std::size_t>(i)],
                      "unscaled gradient " + std::to_string(i) + " with " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(update_scale_follows_the_cpu_state_machine) {
  amp::LossScaleConfig config;
  config.dynamic = true;
  config.window = 3;
  config.min_scale = 1.0f;
  config.max_scale = 1024.0f;
  amp::ScalerState cpu = make_state(Device::cpu()), gpu = make_state(Device::cuda(0));
  // Overflows and clean steps: growth past the window, back-off to the minimum and beyond.
  const int pattern[] = {0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  int step = 0;
  for (const int overflow : pattern) {
    for (amp::ScalerState* state : {&cpu, &gpu}) {
      state->found_inf.fill(static_cast<float>(overflow));
      state->first_overflow.fill(static_cast<float>(overflow ? step % 5 : -1));
      amp::update_scale(*state, config);
    }
    const std::string what = "after step " + std::to_string(step++);
    check_gpu_equal(gpu.scale, cpu.scale, "scale " + what);
    check_gpu_equal(gpu.clean_steps, cpu.clean_steps, "clean_steps " + what);
    check_gpu_equal(gpu.skipped_steps, cpu.skipped_steps, "skipped_steps " + what);
    check_gpu_equal(gpu.at_min_streak, cpu.at_min_streak, "at_min_streak " + what);
    check_gpu_equal(gpu.overflow_streak, cpu.overflow_streak, "overflow_streak " + what);
    check_gpu_equal(gpu.unreported_overflow, cpu.unreported_overflow,
                    "unreported_overflow " + what);
  }
}

// The dynamic scaler's fused step: the pass's last block writes the verdict and runs the state
// machine, over two launches' worth of gradients (60) and over none (a launch for the verdict
// alone), through clean steps, growth, overflows and back-off. O2's check-only pass on the same
// gradients ends in the same state, stores nothing, and leaves the inverse of the scale the
// gradients carried (the one before the update).
BOOST_AUTO_TEST_CASE(unscale_check_and_update_matches_the_cpu) {
  amp::LossScaleConfig config;
  config.dynamic = true;
  config.window = 2;
  config.min_scale = 1.0f;
  config.max_scale = 1024.0f;
  Generator generator(103);
  const int pattern[] = {0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0};
  for (const int tensors : {60, 0}) {
    amp::ScalerState cpu = make_state(Device::cpu()), gpu = make_state(Device::cuda(0));
    amp::ScalerState check_cpu = make_state(Device::cpu()), check_gpu = make_state(Device::cuda(0));
    Tensor inverse_cpu = Tensor::zeros({1}, DType::f32);
    Tensor inverse_gpu = to_cuda(inverse_cpu);
    int step = 0;
    for (const int overflow : pattern) {
      std::vector<Tensor> grads, grads_gpu, masters_cpu, masters_gpu;
      for (int i = 0; i < tensors; ++i) {
        Tensor grad =
            random_tensor({1 + (i * 41) % 2500}, kFloatTypes[i % 3], generator, -6e4f, 6e4f);
        if (overflow && i == (step * 7) % tensors) {
          std::vector<float> values = grad.to_floats();
          values.back() = step % 2 ? NAN : -INFINITY;
          grad.copy_from_floats(values);
        }
        grads.push_back(grad);
        grads_gpu.push_back(to_cuda(grad));
        masters_cpu.push_back(Tensor::zeros(grad.shape(), DType::f32));
        masters_gpu.push_back(to_cuda(masters_cpu.back()));
      }
      std::vector<const Tensor*> in_cpu, in_gpu;
      std::vector<Tensor*> out_cpu, out_gpu;
      for (std::size_t i = 0; i < grads.size(); ++i) {
        in_cpu.push_back(&grads[i]);
        in_gpu.push_back(&grads_gpu[i]);
        out_cpu.push_back(&masters_cpu[i]);
        out_gpu.push_back(&masters_gpu[i]);
      }
      const float inverse = 1.0f / cpu.scale.data<float>()[0];
      amp::unscale_check_and_update(in_cpu, out_cpu, cpu, config);
      amp::unscale_check_and_update(in_gpu, out_gpu, gpu, config);
      amp::check_invert_and_update(in_cpu, inverse_cpu, check_cpu, config);
      amp::check_invert_and_update(in_gpu, inverse_gpu, check_gpu, config);
      const std::string what =
          "after step " + std::to_string(step++) + " of " + std::to_string(tensors) + " tensors";
      check_states_equal(gpu, cpu, what);
      check_states_equal(check_gpu, cpu, "check-only " + what);
      check_states_equal(check_gpu, check_cpu, "check-only on both " + what);
      BOOST_TEST(inverse_cpu.data<float>()[0] == inverse, what);
      check_gpu_equal(inverse_gpu, inverse_cpu, "inverse " + what);
      for (std::size_t i = 0; i < grads.size(); ++i) {
        check_gpu_equal(masters_gpu[i], masters_cpu[i],
                        "unscaled gradient " + std::to_string(i) + " " + what);
        check_gpu_equal(grads_gpu[i], grads[i],
                        "checked gradient " + std::to_string(i) + " " + what);
      }
    }
  }
}

// O2's pass with a static scale: no stores, the verdict with an overflow in the second launch,
// and the inverse.
BOOST_AUTO_TEST_CASE(check_and_invert_matches_the_cpu) {
  Generator generator(104);
  std::vector<Tensor> grads, grads_gpu;
  std::vector<const Tensor*> in_cpu, in_gpu;
  for (int i = 0; i < 70; ++i) {
    grads.push_back(random_tensor({1 + i * 29}, kFloatTypes[i % 3], generator, -1.0f, 1.0f));
    if (i == 66) {
      std::vector<float> values = grads.back().to_floats();
      values.back() = INFINITY;
      grads.back().copy_from_floats(values);
    }
    grads_gpu.push_back(to_cuda(grads.back()));
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    in_cpu.push_back(&grads[i]);
    in_gpu.push_back(&grads_gpu[i]);
  }
  Flags cpu(Device::cpu(), 384.0f), gpu(Device::cuda(0), 384.0f);
  Tensor inverse_cpu = Tensor::zeros({1}, DType::f32);
  Tensor inverse_gpu = to_cuda(inverse_cpu);
  amp::check_and_invert(in_cpu, cpu.scale, inverse_cpu, cpu.found_inf, cpu.first_overflow);
  amp::check_and_invert(in_gpu, gpu.scale, inverse_gpu, gpu.found_inf, gpu.first_overflow);
  check_gpu_equal(inverse_gpu, inverse_cpu, "the static scale's inverse");
  BOOST_TEST(to_host(inverse_gpu).to_floats()[0] == 1.0f / 384.0f);
  check_gpu_equal(gpu.found_inf, cpu.found_inf, "the static scale's found_inf");
  BOOST_CHECK_EQUAL(first_of(gpu.first_overflow), 66);
  BOOST_CHECK_EQUAL(first_of(cpu.first_overflow), 66);
}

BOOST_AUTO_TEST_CASE(master_copy_rounds_like_the_cpu) {
  Generator generator(102);
  std::vector<Tensor> masters, model_cpu, model_gpu, masters_gpu;
  for (int i = 0; i < 70; ++i) {  // two launches, of 64 and 6
    masters.push_back(random_tensor({1 + (i * 53) % 2000}, DType::f32, generator, -7e4f, 7e4f));
    masters_gpu.push_back(to_cuda(masters.back()));
    model_cpu.push_back(Tensor::zeros(masters.back().shape(), kFloatTypes[i % 3]));
    model_gpu.push_back(to_cuda(model_cpu.back()));
  }
  std::vector<const Tensor*> in_cpu, in_gpu;
  std::vector<Tensor*> out_cpu, out_gpu;
  for (std::size_t i = 0; i < masters.size(); ++i) {
    in_cpu.push_back(&masters[i]);
    in_gpu.push_back(&masters_gpu[i]);
    out_cpu.push_back(&model_cpu[i]);
    out_gpu.push_back(&model_gpu[i]);
  }
  amp::copy_masters_to_model(in_cpu, out_cpu);
  amp::copy_masters_to_model(in_gpu, out_gpu);
  for (std::size_t i = 0; i < masters.size(); ++i) {
    check_gpu_equal(model_gpu[i], model_cpu[i], "model parameter " + std::to_string(i));
  }
}

BOOST_AUTO_TEST_SUITE_END()
