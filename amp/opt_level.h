// The O0-O3 property table (Apex's defaults) and the command line's overrides of it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace alloy::amp {

enum class OptLevel { O0, O1, O2, O3 };

// Throws UsageError naming the value and the choices.
OptLevel parse_opt_level(const std::string& text);
const char* opt_level_name(OptLevel level);

struct LossScaleConfig {
  bool dynamic = false;
  float static_scale = 1.0f;    // the scale when not dynamic
  float init_scale = 65536.0f;  // 2^16
  std::int64_t window = 2000;   // consecutive finite steps before growing
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;  // 2^24
};

struct AmpProperties {
  OptLevel level = OptLevel::O0;
  DType half_dtype = DType::f16;
  DType model_dtype = DType::f32;  // storage of the model's parameters
  bool cast_policy = false;        // O1: per-op casts, weights stay fp32
  bool keep_batchnorm_fp32 = false;
  bool master_weights = false;
  LossScaleConfig loss_scale;

  // The scale the first step uses.
  float initial_scale() const {
    return loss_scale.dynamic ? loss_scale.init_scale : loss_scale.static_scale;
  }
};

// What the user set explicitly; unset fields take the level's defaults.
struct AmpOverrides {
  std::optional<DType> half_dtype;
  std::optional<bool> keep_batchnorm_fp32;
  std::optional<bool> master_weights;
  std::optional<std::string> loss_scale;  // "dynamic" or a positive number
  std::optional<float> init_scale;
  std::optional<std::int64_t> window;
  std::optional<float> min_scale;
  std::optional<float> max_scale;
};

// The level's defaults with the overrides applied. Combinations that make no sense are
// UsageErrors that say why (O1 with keep_batchnorm_fp32, master weights for an fp32 model, ...).
AmpProperties resolve_properties(OptLevel level, const AmpOverrides& overrides);

// "O2 (model f16, keep_batchnorm_fp32, master weights, dynamic loss scale from 65536)".
std::string describe(const AmpProperties& properties);

}  // namespace alloy::amp
