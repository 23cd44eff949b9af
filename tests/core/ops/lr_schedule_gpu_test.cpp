// The CUDA schedule kernel against the CPU's: the same rate for every step count, read and
// written on the device (the cosine within an ulp: the device's cos).
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>

#include "core/ops/lr_schedule.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(lr_schedule_gpu)

BOOST_AUTO_TEST_CASE(matches_the_cpu_at_every_step_count) {
  for (const LrDecay decay : {LrDecay::constant, LrDecay::linear, LrDecay::cosine}) {
    LrSchedule s;
    s.decay = decay;
    s.base_lr = 0.3f;
    s.min_lr = 0.001f;
    s.warmup_steps = 7;
    s.total_steps = 50;
    Tensor step = Tensor::empty({2}, DType::i32, Device::cpu());
    step.data<std::int32_t>()[1] = 0;
    Tensor lr = Tensor::from_floats({1}, {-1.0f});
    for (std::int32_t done = 0; done <= 60; ++done) {
      step.data<std::int32_t>()[0] = done;
      Tensor device_lr = to_cuda(lr);
      apply_lr_schedule(s, to_cuda(step), device_lr);
      apply_lr_schedule(s, step, lr);
      const double tolerance = decay == LrDecay::cosine ? 1e-7 : 0.0;
      check_gpu_close(device_lr, lr,
                      std::string(lr_decay_name(decay)) + " at step " + std::to_string(done),
                      tolerance, 0.0);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
