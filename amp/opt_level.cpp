#include "amp/opt_level.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "core/setting_error.h"

namespace alloy::amp {

OptLevel parse_opt_level(const std::string& text) {
  if (text == "O0") return OptLevel::O0;
  if (text == "O1") return OptLevel::O1;
  if (text == "O2") return OptLevel::O2;
  if (text == "O3") return OptLevel::O3;
  setting_fail("{opt_level} '", text, "' is not one of O0, O1, O2, O3 (the letter O, not zero)");
}

const char* opt_level_name(OptLevel level) {
  switch (level) {
    case OptLevel::O0:
      return "O0";
    case OptLevel::O1:
      return "O1";
    case OptLevel::O2:
      return "O2";
    case OptLevel::O3:
      return "O3";
  }
  return "?";
}

namespace {

AmpProperties defaults(OptLevel level, DType half) {
  AmpProperties p;
  p.level = level;
  p.half_dtype = half;
  switch (level) {
    case OptLevel::O0:
      break;
    case OptLevel::O1:
      p.cast_policy = true;
      p.loss_scale.dynamic = true;
      break;
    case OptLevel::O2:
      p.model_dtype = half;
      p.keep_batchnorm_fp32 = true;
      p.master_weights = true;
      p.loss_scale.dynamic = true;
      break;
    case OptLevel::O3:
      p.model_dtype = half;
      break;
  }
  // bfloat16 has fp32's exponent range: gradients do not underflow, so no scaling by default.
  if (half == DType::bf16) p.loss_scale.dynamic = false;
  return p;
}

float positive_finite(const char* setting, float value) {
  if (!(std::isfinite(value) && value > 0.0f)) {
    setting_fail("{", setting, "} must be a positive finite number, got ", value);
  }
  return value;
}

}  // namespace

AmpProperties resolve_properties(OptLevel level, const AmpOverrides& overrides) {
  const DType half = overrides.half_dtype.value_or(DType::f16);
  if (!is_half(half)) setting_fail("{half_dtype} must be fp16 or bf16, got ", dtype_name(half));
  AmpProperties p = defaults(level, half);
  const char* name = opt_level_name(level);
  const bool half_model = p.model_dtype != DType::f32;

  if (overrides.keep_batchnorm_fp32) {
    if (level == OptLevel::O1) {
      setting_fail(
          "{keep_batchnorm_fp32} cannot be used with O1: O1 casts per op and keeps every "
          "weight in fp32 already");
    }
    if (!half_model) {
      setting_fail("{keep_batchnorm_fp32} needs a half model (O2 or O3); ", name,
                   " keeps the model in fp32");
    }
    p.keep_batchnorm_fp32 = *overrides.keep_batchnorm_fp32;
  }
  if (overrides.master_weights) {
    if (*overrides.master_weights && !half_model) {
      setting_fail("{master_weights} true needs a half model (O2 or O3): at ", name,
                   " the fp32 weights already are the masters");
    }
    p.master_weights = *overrides.master_weights;
  }

  LossScaleConfig& scale = p.loss_scale;
  if (overrides.loss_scale) {
    const std::string& text = *overrides.loss_scale;
    if (text == "dynamic") {
      scale.dynamic = true;
    } else {
      char* end = nullptr;
      const float value = std::strtof(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0') {
        setting_fail("{loss_scale} must be 'dynamic' or a number, got '", text, "'");
      }
      scale.dynamic = false;
      scale.static_scale = positive_finite("loss_scale", value);
    }
  }
  if (overrides.init_scale)
    scale.init_scale = positive_finite("init_loss_scale", *overrides.init_scale);
  if (overrides.min_scale)
    scale.min_scale = positive_finite("min_loss_scale", *overrides.min_scale);
  if (overrides.max_scale)
    scale.max_scale = positive_finite("max_loss_scale", *overrides.max_scale);
  if (overrides.window) {
    if (*overrides.window < 1)
      setting_fail("{scale_window} must be at least 1, got ", *overrides.window);
    scale.window = *overrides.window;
  }
  const bool tunes_dynamic =
      overrides.init_scale || overrides.min_scale || overrides.max_scale || overrides.window;
  if (tunes_dynamic && !scale.dynamic) {
    setting_fail("{init_loss_scale}, {scale_window}, {min_loss_scale} and {max_loss_scale} tune ",
                 "the dynamic loss scaler, but ", name, " uses a static scale here; add ",
                 "{loss_scale} dynamic");
  }
  if (scale.min_scale > scale.max_scale) {
    setting_fail("{min_loss_scale} (", scale.min_scale, ") is above {max_loss_scale} (",
                 scale.max_scale, ")");
  }
  if (scale.dynamic && (scale.init_scale < scale.min_scale || scale.init_scale > scale.max_scale)) {
    setting_fail("{init_loss_scale} ", scale.init_scale, " is outside [", scale.min_scale, ", ",
                 scale.max_scale, "] ({min_loss_scale}, {max_loss_scale})");
  }
  return p;
}

std::string describe(const AmpProperties& p) {
  std::ostringstream out;
  out << opt_level_name(p.level) << " (model " << dtype_name(p.model_dtype);
  if (p.cast_policy) out << ", " << dtype_name(p.half_dtype) << " casts per op";
  if (p.model_dtype != DType::f32 && p.keep_batchnorm_fp32) out << ", batch-norm fp32";
  if (p.master_weights) out << ", fp32 master weights";
  if (p.loss_scale.dynamic) {
    out << ", dynamic loss scale from " << p.loss_scale.init_scale;
  } else {
    out << ", static loss scale " << p.loss_scale.static_scale;
  }
  out << ')';
  return out.str();
}

}  // namespace alloy::amp
