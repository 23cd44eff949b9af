#include "amp/loss_scaler.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "amp/ops/unscale.h"
#include "core/half.h"
#include "core/round_trips.h"

using namespace alloy;
using namespace alloy::amp;

namespace {
LossScaleConfig dynamic_config(float init, std::int64_t window, float min, float max) {
  LossScaleConfig config;
  config.dynamic = true;
  config.init_scale = init;
  config.window = window;
  config.min_scale = min;
  config.max_scale = max;
  return config;
}

void set_found_inf(LossScaler& scaler, bool overflow) {
  scaler.state().found_inf.data<float>()[0] = overflow ? 1.0f : 0.0f;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(loss_scaler)

BOOST_AUTO_TEST_CASE(grows_after_a_full_window_of_clean_steps) {
  LossScaler scaler(dynamic_config(1024.0f, 3, 1.0f, 65536.0f), Device::cpu());
  for (int step = 0; step < 2; ++step) {
    set_found_inf(scaler, false);
    scaler.update();
  }
  BOOST_TEST(scaler.snapshot().scale == 1024.0f);
  BOOST_TEST(scaler.snapshot().clean_steps == 2);
  set_found_inf(scaler, false);
  scaler.update();
  BOOST_TEST(scaler.snapshot().scale == 2048.0f);
  BOOST_TEST(scaler.snapshot().clean_steps == 0);
}

BOOST_AUTO_TEST_CASE(backs_off_skips_and_restarts_the_window) {
  LossScaler scaler(dynamic_config(1024.0f, 3, 1.0f, 65536.0f), Device::cpu());
  set_found_inf(scaler, false);
  scaler.update();
  set_found_inf(scaler, true);
  scaler.update();
  const ScalerSnapshot after = scaler.snapshot();
  BOOST_TEST(after.scale == 512.0f);
  BOOST_TEST(after.clean_steps == 0);
  BOOST_TEST(after.skipped_steps == 1);
}

BOOST_AUTO_TEST_CASE(clamps_to_min_and_max_and_counts_the_streak_at_min) {
  LossScaler grow(dynamic_config(4.0f, 1, 1.0f, 8.0f), Device::cpu());
  for (int step = 0; step < 5; ++step) {
    set_found_inf(grow, false);
    grow.update();
  }
  BOOST_TEST(grow.snapshot().scale == 8.0f);

  LossScaler shrink(dynamic_config(4.0f, 10, 1.0f, 8.0f), Device::cpu());
  for (int step = 0; step < 6; ++step) {
    set_found_inf(shrink, true);
    shrink.update();
  }
  const ScalerSnapshot s = shrink.snapshot();
  BOOST_TEST(s.scale == 1.0f);
  BOOST_TEST(s.skipped_steps == 6);
  // 4 -> 2 -> 1 took two overflows; the four after it happened at the minimum.
  BOOST_TEST(s.at_min_streak == 4);
  set_found_inf(shrink, false);
  shrink.update();
  BOOST_TEST(shrink.snapshot().at_min_streak == 0);
}

BOOST_AUTO_TEST_CASE(static_scale_never_changes) {
  LossScaleConfig config;
  config.static_scale = 128.0f;
  LossScaler scaler(config, Device::cpu());
  set_found_inf(scaler, true);
  scaler.update();
  BOOST_TEST(scaler.snapshot().scale == 128.0f);
  BOOST_TEST(scaler.snapshot().skipped_steps == 0);
}

BOOST_AUTO_TEST_CASE(snapshot_restore_round_trips) {
  LossScaler scaler(dynamic_config(1024.0f, 5, 1.0f, 65536.0f), Device::cpu());
  ScalerSnapshot saved{256.0f, 3, 7, 0, 2};
  scaler.restore(saved);
  const ScalerSnapshot back = scaler.snapshot();
  BOOST_TEST(back.scale == 256.0f);
  BOOST_TEST(back.clean_steps == 3);
  BOOST_TEST(back.skipped_steps == 7);
  BOOST_TEST(back.first_overflow == 2);
}

// The overflow monitor's poll and a checkpoint's snapshot read the whole state in one download;
// the poll's is queued (core/queued_download.h): on the CPU it has arrived at once, and neither
// queuing nor taking it is a host wait.
BOOST_AUTO_TEST_CASE(a_poll_reads_everything_in_one_download_and_takes_the_overflow) {
  LossScaler scaler(dynamic_config(1024.0f, 5, 1.0f, 65536.0f), Device::cpu());
  set_found_inf(scaler, true);
  scaler.state().first_overflow.data<std::int32_t>()[0] = 4;
  scaler.update();
  set_found_inf(scaler, true);
  scaler.state().first_overflow.data<std::int32_t>()[0] = 1;
  scaler.update();
  RoundTrips before = round_trips();
  scaler.queue_poll();
  BOOST_TEST(scaler.poll_queued());
  BOOST_TEST(scaler.poll_arrived());
  // A step after the poll: it must not show in what the poll read.
  set_found_inf(scaler, true);
  scaler.state().first_overflow.data<std::int32_t>()[0] = 6;
  scaler.update();
  const LossScaler::Poll poll = scaler.take_poll();
  BOOST_TEST(!scaler.poll_queued());
  const RoundTrips cost = round_trips() - before;
  BOOST_TEST(cost.downloads == 1u);
  BOOST_TEST(cost.host_waits == 0u);
  BOOST_TEST(cost.uploads == 0u);
  BOOST_TEST(poll.state.scale == 256.0f);
  BOOST_TEST(poll.state.skipped_steps == 2);
  BOOST_TEST(poll.state.overflow_streak == 2);
  BOOST_TEST(poll.state.first_overflow == 1);
  BOOST_TEST(poll.unreported_overflow == 4);  // the earlier step's
  // Taken: the next poll has only the step after the poll's overflow to report.
  scaler.queue_poll();
  BOOST_TEST(scaler.take_poll().unreported_overflow == 6);
  scaler.queue_poll();
  BOOST_TEST(scaler.take_poll().unreported_overflow == -1);
  BOOST_CHECK_THROW(scaler.take_poll(), Error);  // nothing queued
  before = round_trips();
  BOOST_TEST(scaler.snapshot().skipped_steps == 3);
  BOOST_TEST((round_trips() - before).downloads == 1u);
}

// restore() sets the snapshot's fields only: the step's verdict and the overflow not yet
// reported stay as they were.
BOOST_AUTO_TEST_CASE(restore_leaves_the_verdict_and_the_unreported_overflow) {
  LossScaler scaler(dynamic_config(1024.0f, 5, 1.0f, 65536.0f), Device::cpu());
  set_found_inf(scaler, true);
  scaler.state().first_overflow.data<std::int32_t>()[0] = 3;
  scaler.update();
  scaler.restore(ScalerSnapshot{64.0f, 1, 9, 2, 0, -1});
  BOOST_TEST(scaler.state().found_inf.data<float>()[0] == 1.0f);
  scaler.queue_poll();
  const LossScaler::Poll poll = scaler.take_poll();
  BOOST_TEST(poll.unreported_overflow == 3);
  BOOST_TEST(poll.state.scale == 64.0f);
  BOOST_TEST(poll.state.clean_steps == 1);
  BOOST_TEST(poll.state.skipped_steps == 9);
  BOOST_TEST(poll.state.at_min_streak == 2);
  BOOST_TEST(poll.state.first_overflow == 0);
  BOOST_TEST(poll.state.overflow_streak == -1);
}

BOOST_AUTO_TEST_CASE(unscale_multiplies_by_the_inverse_and_flags_inf_and_nan) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor scale = Tensor::from_floats({1}, {8.0f});
  Tensor found_inf = Tensor::from_floats({1}, {0.0f});
  Tensor first = Tensor::from_floats({1}, {0.0f}, DType::i32);

  Tensor clean = Tensor::from_floats({3}, {8.0f, -16.0f, 4.0f}, DType::f16);
  Tensor with_nan = Tensor::from_floats({2}, {1.0f, nan}, DType::f16);
  Tensor with_inf = Tensor::from_floats({2}, {inf, 2.0f}, DType::f32);
  Tensor out0 = Tensor::zeros({3}, DType::f32);
  Tensor out1 = Tensor::zeros({2}, DType::f32);

  unscale_and_check({&clean}, {&out0}, scale, found_inf, first);
  BOOST_TEST(found_inf.to_floats()[0] == 0.0f);
  BOOST_TEST(first.to_floats()[0] == -1.0f);
  const auto values = out0.to_floats();
  BOOST_TEST(values[0] == 1.0f);
  BOOST_TEST(values[1] == -2.0f);
  BOOST_TEST(values[2] == 0.5f);

  unscale_and_check({&clean, &with_nan, &with_inf}, {&out0, &out1, &with_inf}, scale, found_inf,
                    first);
  BOOST_TEST(found_inf.to_floats()[0] == 1.0f);
  BOOST_TEST(first.to_floats()[0] == 1.0f);  // the NaN tensor comes first

  unscale_and_check({&with_inf}, {&with_inf}, scale, found_inf, first);
  BOOST_TEST(found_inf.to_floats()[0] == 1.0f);
  BOOST_TEST(first.to_floats()[0] == 0.0f);
}

// O2's pass: the gradients stay as they are, the verdict is unscale_and_check's, and the
// inverse of the scale they carry is left for the clip and the update, also when the dynamic
// scaler's update in the same pass changes the scale.
BOOST_AUTO_TEST_CASE(check_and_invert_leaves_the_gradients_and_writes_the_inverse) {
  Tensor scale = Tensor::from_floats({1}, {8.0f});
  Tensor inverse = Tensor::zeros({1}, DType::f32);
  Tensor found_inf = Tensor::from_floats({1}, {0.0f});
  Tensor first = Tensor::from_floats({1}, {0.0f}, DType::i32);
  Tensor clean = Tensor::from_floats({3}, {8.0f, -16.0f, 4.0f}, DType::f16);
  Tensor with_inf = Tensor::from_floats({2}, {2.0f, std::numeric_limits<float>::infinity()});
  check_and_invert({&clean}, scale, inverse, found_inf, first);
  BOOST_TEST(inverse.to_floats()[0] == 0.125f);
  BOOST_TEST(found_inf.to_floats()[0] == 0.0f);
  BOOST_TEST(first.to_floats()[0] == -1.0f);
  BOOST_TEST(clean.to_floats() == std::vector<float>({8.0f, -16.0f, 4.0f}));
  check_and_invert({&clean, &with_inf}, scale, inverse, found_inf, first);
  BOOST_TEST(found_inf.to_floats()[0] == 1.0f);
  BOOST_TEST(first.to_floats()[0] == 1.0f);
  BOOST_TEST(with_inf.to_floats()[0] == 2.0f);

  LossScaleConfig config;
  config.dynamic = true;
  config.init_scale = 4.0f;
  config.window = 1;
  LossScaler scaler(config, Device::cpu());
  check_invert_and_update({&clean}, inverse, scaler.state(), config);
  BOOST_TEST(scaler.snapshot().scale == 8.0f);  // grown after the clean step
  BOOST_TEST(inverse.to_floats()[0] == 0.25f);  // the inverse of the scale the step carries
  check_invert_and_update({&with_inf}, inverse, scaler.state(), config);
  BOOST_TEST(scaler.snapshot().scale == 4.0f);
  BOOST_TEST(scaler.snapshot().skipped_steps == 1);
  BOOST_TEST(inverse.to_floats()[0] == 0.125f);
  BOOST_TEST(clean.to_floats() == std::vector<float>({8.0f, -16.0f, 4.0f}));
}

BOOST_AUTO_TEST_CASE(unscale_sees_values_that_overflowed_half) {
  // 70000 is past fp16's range: stored as inf, which must be caught, not scaled to a number.
  Tensor scale = Tensor::from_floats({1}, {65536.0f});
  Tensor found_inf = Tensor::from_floats({1}, {0.0f});
  Tensor first = Tensor::from_floats({1}, {0.0f}, DType::i32);
  Tensor grad = Tensor::from_floats({2}, {1.0f, 70000.0f}, DType::f16);
  Tensor out = Tensor::zeros({2}, DType::f32);
  unscale_and_check({&grad}, {&out}, scale, found_inf, first);
  BOOST_TEST(found_inf.to_floats()[0] == 1.0f);
}

BOOST_AUTO_TEST_SUITE_END()
