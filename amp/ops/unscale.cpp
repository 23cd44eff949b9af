#include "amp/ops/unscale.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "amp/ops/cuda/unscale.h"
#include "core/cuda/context.h"
#endif

namespace alloy::amp {

namespace {

// The checks and the pass. outputs empty: the check alone, with the inverse written to
// inverse_scale (not null then); update (not null) is the scaler's state machine to run after
// the verdict, in the same launch on the device.
void unscale_pass(const char* op, const std::vector<const Tensor*>& grads,
                  const std::vector<Tensor*>& outputs, const Tensor& scale, Tensor* inverse_scale,
                  Tensor& found_inf, Tensor& first_overflow, ScalerState* update_state,
                  const LossScaleConfig* config) {
  const bool check_only = inverse_scale != nullptr;
  ALLOY_CHECK(check_only ? outputs.empty() : grads.size() == outputs.size(), op, ": ", grads.size(),
              " gradients but ", outputs.size(), " outputs");
  check_dtype(op, "scale", scale, DType::f32);
  check_dtype(op, "found_inf", found_inf, DType::f32);
  check_dtype(op, "first_overflow", first_overflow, DType::i32);
  const Device device = common_device(op, {&scale, &found_inf, &first_overflow});
  if (check_only) {
    check_dtype(op, "inverse_scale", *inverse_scale, DType::f32);
    check_shape(op, "inverse_scale", *inverse_scale, {1});
    ALLOY_CHECK(inverse_scale->device() == device, op, ": inverse_scale is not on ", device.str());
  }
  for (std::size_t i = 0; i < grads.size(); ++i) {
    check_floating(op, "gradient", *grads[i]);
    ALLOY_CHECK(grads[i]->device() == device, op, ": gradient ", i, " is not on ", device.str());
    if (check_only) continue;
    check_floating(op, "output", *outputs[i]);
    check_shape(op, "output", *outputs[i], grads[i]->shape());
    ALLOY_CHECK(outputs[i]->device() == device, op, ": output ", i, " is not on ", device.str());
  }
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      std::vector<cuda::UnscaleItem> items;
      items.reserve(grads.size());
      for (std::size_t i = 0; i < grads.size(); ++i) {
        items.push_back({grads[i]->raw(), grads[i]->dtype(),
                         check_only ? nullptr : outputs[i]->raw(),
                         check_only ? grads[i]->dtype() : outputs[i]->dtype(), grads[i]->numel()});
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
                              check_only ? inverse_scale->data<float>() : nullptr,
                              update_state != nullptr ? &step : nullptr, ctx.stream.get());
      return;
    });

  const float inverse = 1.0f / scale.data<float>()[0];
  std::int32_t first = -1;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const bool bad = cpu::unscale_and_check(
        grads[i]->raw(), grads[i]->dtype(), check_only ? nullptr : outputs[i]->raw(),
        check_only ? grads[i]->dtype() : outputs[i]->dtype(), grads[i]->numel(), inverse);
    if (bad && first < 0) first = static_cast<std::int32_t>(i);
  }
  found_inf.data<float>()[0] = first >= 0 ? 1.0f : 0.0f;
  first_overflow.data<std::int32_t>()[0] = first;
  if (check_only) inverse_scale->data<float>()[0] = inverse;
  if (update_state != nullptr) update_scale(*update_state, *config);
}

// update_scale's own checks: every piece of the state on the scale's device, in its dtype.
void check_scaler_state(const char* op, const ScalerState& state) {
  check_dtype(op, "clean_steps", state.clean_steps, DType::i32);
  check_dtype(op, "skipped_steps", state.skipped_steps, DType::i32);
  check_dtype(op, "at_min_streak", state.at_min_streak, DType::i32);
  check_dtype(op, "overflow_streak", state.overflow_streak, DType::i32);
  check_dtype(op, "unreported_overflow", state.unreported_overflow, DType::i32);
  common_device(op, {&state.scale, &state.clean_steps, &state.skipped_steps, &state.at_min_streak,
                     &state.overflow_streak, &state.found_inf, &state.first_overflow,
                     &state.unreported_overflow});
}

}  // namespace

void unscale_and_check(const std::vector<const Tensor*>& grads, const std::vector<Tensor*>& outputs,
                       const Tensor& scale, Tensor& found_inf, Tensor& first_overflow) {
  unscale_pass("unscale_and_check", grads, outputs, scale, nullptr, found_inf, first_overflow,
               nullptr, nullptr);
}

void unscale_check_and_update(const std::vector<const Tensor*>& grads,
                              const std::vector<Tensor*>& outputs, ScalerState& state,
                              const LossScaleConfig& config) {
  constexpr const char* op = "unscale_check_and_update";
  check_scaler_state(op, state);
  unscale_pass(op, grads, outputs, state.scale, nullptr, state.found_inf, state.first_overflow,
               &state, &config);
}

void check_and_invert(const std::vector<const Tensor*>& grads, const Tensor& scale,
                      Tensor& inverse_scale, Tensor& found_inf, Tensor& first_overflow) {
  unscale_pass("check_and_invert", grads, {}, scale, &inverse_scale, found_inf, first_overflow,
               nullptr, nullptr);
}

void check_invert_and_update(const std::vector<const Tensor*>& grads, Tensor& inverse_scale,
                             ScalerState& state, const LossScaleConfig& config) {
  constexpr const char* op = "check_invert_and_update";
  check_scaler_state(op, state);
  unscale_pass(op, grads, {}, state.scale, &inverse_scale, state.found_inf, state.first_overflow,
               &state, &config);
}

}  // namespace alloy::amp
