#include "amp/ops/update_scale.h"

#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "amp/ops/cuda/update_scale.h"
#include "core/cuda/context.h"
#endif

namespace alloy::amp {

void update_scale(ScalerState& state, const LossScaleConfig& config) {
  constexpr const char* op = "update_scale";
  check_dtype(op, "scale", state.scale, DType::f32);
  check_dtype(op, "clean_steps", state.clean_steps, DType::i32);
  check_dtype(op, "skipped_steps", state.skipped_steps, DType::i32);
  check_dtype(op, "at_min_streak", state.at_min_streak, DType::i32);
  check_dtype(op, "overflow_streak", state.overflow_streak, DType::i32);
  check_dtype(op, "found_inf", state.found_inf, DType::f32);
  check_dtype(op, "first_overflow", state.first_overflow, DType::i32);
  check_dtype(op, "unreported_overflow", state.unreported_overflow, DType::i32);
  const Device device =
      common_device(op, {&state.scale, &state.clean_steps, &state.skipped_steps,
                         &state.at_min_streak, &state.overflow_streak, &state.found_inf,
                         &state.first_overflow, &state.unreported_overflow});
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::update_scale(
          state.scale.data<float>(), state.clean_steps.data<std::int32_t>(),
          state.skipped_steps.data<std::int32_t>(), state.at_min_streak.data<std::int32_t>(),
          state.overflow_streak.data<std::int32_t>(), state.found_inf.data<float>(),
          state.first_overflow.data<std::int32_t>(), state.unreported_overflow.data<std::int32_t>(),
          config, alloy::cuda::stream_of(device));
      return;
    });
  cpu::update_scale(state.scale.data<float>(), state.clean_steps.data<std::int32_t>(),
                    state.skipped_steps.data<std::int32_t>(),
                    state.at_min_streak.data<std::int32_t>(),
                    state.overflow_streak.data<std::int32_t>(), state.found_inf.data<float>(),
                    state.first_overflow.data<std::int32_t>(),
                    state.unreported_overflow.data<std::int32_t>(), config);
}

}  // namespace alloy::amp
