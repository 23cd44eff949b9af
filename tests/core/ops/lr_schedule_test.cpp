// Learning-rate schedules (core/ops/lr_schedule.h): the formula at the points a user checks
// (warm-up ramp, the decay's start, middle and end, past the end), the op that writes it where
// the step count lives, and an optimizer that follows it: each update uses the rate of its
// step count, and a step the loss scaler skips does not advance the schedule.
#include "core/ops/lr_schedule.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/optim/optimizer.h"

using namespace alloy;

namespace {

LrSchedule schedule(LrDecay decay, float base, float min, std::int64_t warmup, std::int64_t total) {
  LrSchedule s;
  s.decay = decay;
  s.base_lr = base;
  s.min_lr = min;
  s.warmup_steps = warmup;
  s.total_steps = total;
  return s;
}

// The rate the op writes for a step count.
float op_lr(const LrSchedule& s, std::int32_t done) {
  Tensor step = Tensor::empty({2}, DType::i32, Device::cpu());
  step.data<std::int32_t>()[0] = done;
  step.data<std::int32_t>()[1] = 0;
  Tensor lr = Tensor::from_floats({1}, {-1.0f});
  apply_lr_schedule(s, step, lr);
  return lr.data<float>()[0];
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lr_schedule)

BOOST_AUTO_TEST_CASE(warm_up_ramps_linearly_from_base_over_n_to_base) {
  const LrSchedule s = schedule(LrDecay::constant, 0.4f, 0.0f, 4, 100);
  BOOST_TEST(scheduled_lr(s, 0) == 0.1f);
  BOOST_TEST(scheduled_lr(s, 1) == 0.2f);
  BOOST_TEST(scheduled_lr(s, 2) == static_cast<float>(0.4 * 3 / 4));
  BOOST_TEST(scheduled_lr(s, 3) == 0.4f);
  BOOST_TEST(scheduled_lr(s, 4) == 0.4f);
  BOOST_TEST(scheduled_lr(s, 1000) == 0.4f);
}

BOOST_AUTO_TEST_CASE(cosine_starts_at_base_halves_in_the_middle_and_ends_at_min) {
  // Warm-up 4, then 10 steps of decay from 1.0 to 0.2.
  const LrSchedule s = schedule(LrDecay::cosine, 1.0f, 0.2f, 4, 14);
  const double pi = std::acos(-1.0);
  BOOST_TEST(scheduled_lr(s, 3) == 1.0f);  // the warm-up's last step
  BOOST_TEST(scheduled_lr(s, 4) == 1.0f);  // p = 0
  BOOST_TEST(scheduled_lr(s, 9) == 0.6f);  // p = 1/2: cos = 0
  BOOST_TEST(scheduled_lr(s, 6) == static_cast<float>(0.2 + 0.8 * 0.5 * (1 + std::cos(pi * 0.2))));
  BOOST_TEST(scheduled_lr(s, 14) == 0.2f);   // p = 1
  BOOST_TEST(scheduled_lr(s, 500) == 0.2f);  // past the end: stays at min
  for (std::int64_t t = 5; t <= 14; ++t)
    BOOST_TEST(scheduled_lr(s, t) < scheduled_lr(s, t - 1), "decreasing at " << t);
}

BOOST_AUTO_TEST_CASE(linear_decays_in_equal_steps_to_min) {
  const LrSchedule s = schedule(LrDecay::linear, 0.5f, 0.1f, 0, 8);
  for (std::int64_t t = 0; t <= 8; ++t) {
    BOOST_TEST(scheduled_lr(s, t) == static_cast<float>(0.1 + 0.4 * (1.0 - t / 8.0)), "step " << t);
  }
  BOOST_TEST(scheduled_lr(s, 9) == 0.1f);
}

BOOST_AUTO_TEST_CASE(a_run_shorter_than_its_warm_up_only_warms_up) {
  const LrSchedule s = schedule(LrDecay::cosine, 1.0f, 0.0f, 100, 10);
  BOOST_TEST(scheduled_lr(s, 9) == 0.1f);
  BOOST_TEST(scheduled_lr(s, 99) == 1.0f);
  BOOST_TEST(scheduled_lr(s, 100) == 1.0f);  // p = 0 after the warm-up (the span is at least 1)
}

BOOST_AUTO_TEST_CASE(the_op_writes_the_rate_of_the_step_count) {
  const LrSchedule s = schedule(LrDecay::cosine, 0.3f, 0.01f, 2, 20);
  for (const std::int32_t done : {0, 1, 2, 7, 19, 20, 1 << 30}) {
    BOOST_TEST(op_lr(s, done) == scheduled_lr(s, done), "step count " << done);
  }
  Tensor step = Tensor::empty({2}, DType::i32, Device::cpu());
  Tensor wrong = Tensor::empty({2}, DType::f32, Device::cpu());
  BOOST_CHECK_THROW(apply_lr_schedule(s, step, wrong), Error);
  Tensor lr = Tensor::from_floats({1}, {0.0f});
  BOOST_CHECK_THROW(apply_lr_schedule(schedule(LrDecay::linear, 0.1f, 0.2f, 0, 5), step, lr),
                    Error);  // min above base
}

BOOST_AUTO_TEST_CASE(names_parse_and_unknown_ones_are_usage_errors) {
  BOOST_TEST((parse_lr_decay("cosine") == LrDecay::cosine));
  BOOST_TEST((parse_lr_decay("linear") == LrDecay::linear));
  BOOST_TEST(std::string(lr_decay_name(parse_lr_decay("constant"))) == "constant");
  BOOST_CHECK_THROW(parse_lr_decay("exponential"), UsageError);
}

// SGD without momentum on a parameter of zeros with gradient one: after each step the parameter
// has moved by exactly the sum of the rates used, so the rates can be read back one by one.
BOOST_AUTO_TEST_CASE(an_optimizer_uses_the_rate_of_each_step_and_skips_do_not_advance_it) {
  nn::Parameter param;
  param.name = "w";
  param.value = Tensor::from_floats({1}, {0.0f});
  param.grad = Tensor::from_floats({1}, {1.0f});
  optim::OptimizerConfig config;
  config.lr = 0.25f;
  auto sgd = optim::make_optimizer(config, {&param});
  const LrSchedule s =
      schedule(LrDecay::linear, 123.0f /* replaced by the config's */, 0.05f, 2, 6);
  sgd->set_schedule(s);
  BOOST_REQUIRE(sgd->schedule());
  BOOST_TEST(sgd->schedule()->base_lr == 0.25f);
  LrSchedule expected = s;
  expected.base_lr = 0.25f;
  BOOST_TEST(sgd->current_lr() == scheduled_lr(expected, 0));  // before any step

  Tensor found_inf = Tensor::from_floats({1}, {0.0f});
  float before = 0.0f;
  std::int64_t applied = 0;
  for (int call = 0; call < 9; ++call) {
    const bool skip = call == 3 || call == 4;
    found_inf.data<float>()[0] = skip ? 1.0f : 0.0f;
    sgd->step(1.0f, found_inf);
    const float after = param.value.data<float>()[0];
    if (skip) {
      BOOST_TEST(after == before, "a skipped step changes nothing, call " << call);
    } else {
      BOOST_TEST(after == before - scheduled_lr(expected, applied), "call " << call);
      ++applied;
    }
    BOOST_TEST(sgd->steps() == applied);
    before = after;
  }
  BOOST_TEST(sgd->current_lr() == scheduled_lr(expected, applied - 1));  // the last update's

  // A fixed rate again after set_schedule(nullopt): set_lr's value, whatever the count.
  sgd->set_schedule(std::nullopt);
  sgd->set_lr(0.5f);
  sgd->step(1.0f, {});
  BOOST_TEST(param.value.data<float>()[0] == before - 0.5f);

  optim::OptimizerConfig bad = config;
  auto other = optim::make_optimizer(bad, {&param});
  BOOST_CHECK_THROW(other->set_schedule(schedule(LrDecay::cosine, 0.0f, 0.3f, 0, 10)), Error);
}

BOOST_AUTO_TEST_SUITE_END()
