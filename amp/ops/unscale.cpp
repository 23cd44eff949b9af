#include "amp/ops/unscale.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "amp/ops/cuda/unscale.h"
#include "core/cuda/context.h"
#endif

namespace alloy::amp {

namespace {

// The checks and the pass; update (device only) is the state machine to run in the same launch.
void unscale_pass(const std::vector<const Tensor*>& grads, const std::vector<Tensor*>& outputs,
                  const Tensor& scale, Tensor& found_inf, Tensor& first_overflow,
                  ScalerState* update_state, const LossScaleConfig* config) {
  constexpr const char* op = "unscale_and_check";
  ALLOY_CHECK(grads.size() == outputs.size(), op, ": ", grads.size(), " gradients but ",
              outputs.size(), " outputs");
  check_dtype(op, "scale", scale, DType::f32);
  check_dtype(op, "found_inf", found_inf, DType::f32);
  check_dtype(op, "first_overflow", first_overflow, DType::i32);
  const Device device = common_device(op, {&scale, &found_inf, &first_overflow});
  for (std::size_t i = 0; i < grads.size(); ++i) {
    check_floating(op, "gradient", *grads[i]);
    check_floating(op, "output", *outputs[i]);
    check_shape(op, "output", *outputs[i], grads[i]->shape());
    ALLOY_CHECK(grads[i]->device() == device && outputs[i]->device() == device, op, ": gradient ",
                i, " is not on ", device.str());
  }
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      std::vector<cuda::UnscaleItem> items;
      items.reserve(grads.size());
      for (std::size_t i = 0; i < grads.size(); ++i) {
        items.push_back({grads[i]->raw(), grads[i]->dtype(), outputs[i]->raw(), outputs[i]->dtype(),
                         grads[i]->numel()});
      }
      cuda::ScalerStep step{};
      if (update_state != nullptr) {
        ScalerState& s = *update_state;
        step = cuda::scaler_step_of(s.scale.data<float>(), s.clean_steps.data<std::int32_t>(),
                                    s.skipped_steps.data<std::int32_t>(),
                                    s.at_min_streak.data<std::int32_t>(),
                                    s.overflow_streak.data<std::int32_t>(),
                                    s.unreported_overflow.data<std::int32_t>(), *config);
      }
      alloy::cuda::DeviceContext& ctx = alloy::cuda::context(device);
      cuda::unscale_and_check(items, scale.data<float>(), found_inf.data<float>(),
                              first_overflow.data<std::int32_t>(),
                              update_state != nullptr ? &step : nullptr, ctx.stream.get());
      return;
    });

  const float inverse_scale = 1.0f / scale.data<float>()[0];
  std::int32_t first = -1;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const bool bad = cpu::unscale_and_check(grads[i]->raw(), grads[i]->dtype(), outputs[i]->raw(),
                                            outputs[i]->dtype(), grads[i]->numel(), inverse_scale);
    if (bad && first < 0) first = static_cast<std::int32_t>(i);
  }
  found_inf.data<float>()[0] = first >= 0 ? 1.0f : 0.0f;
  first_overflow.data<std::int32_t>()[0] = first;
  if (update_state != nullptr) update_scale(*update_state, *config);
}

}  // namespace

void unscale_and_check(const std::vector<const Tensor*>& grads, const std::vector<Tensor*>& outputs,
                       const Tensor& scale, Tensor& found_inf, Tensor& first_overflow) {
  unscale_pass(grads, outputs, scale, found_inf, first_overflow, nullptr, nullptr);
}

void unscale_check_and_update(const std::vector<const Tensor*>& grads,
                              const std::vector<Tensor*>& outputs, ScalerState& state,
                              const LossScaleConfig& config) {
  // update_scale's own checks: every piece of the state on the scale's device, in its dtype.
  check_dtype("unscale_check_and_update", "clean_steps", state.clean_steps, DType::i32);
  check_dtype("unscale_check_and_update", "skipped_steps", state.skipped_steps, DType::i32);
  check_dtype("unscale_check_and_update", "at_min_streak", state.at_min_streak, DType::i32);
  check_dtype("unscale_check_and_update", "overflow_streak", state.overflow_streak, DType::i32);
  check_dtype("unscale_check_and_update", "unreported_overflow", state.unreported_overflow,
              DType::i32);
  common_device("unscale_check_and_update",
                {&state.scale, &state.clean_steps, &state.skipped_steps, &state.at_min_streak,
                 &state.overflow_streak, &state.found_inf, &state.first_overflow,
                 &state.unreported_overflow});
  unscale_pass(grads, outputs, state.scale, state.found_inf, state.first_overflow, &state, &config);
}

}  // namespace alloy::amp
