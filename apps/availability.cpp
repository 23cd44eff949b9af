#include "apps/availability.h"

#include "core/error.h"

namespace alloy::app {

void check_train_features_available(const TrainOptions& o) {
  const amp::AmpProperties& p = o.precision;
  if (p.level != amp::OptLevel::O0) {
    fail("opt level ", amp::opt_level_name(p.level),
         " is not available yet: `alloy train` runs fp32 (O0) only until mixed-precision "
         "training lands; use --opt-level O0");
  }
  if (o.was_given("half-dtype") && p.half_dtype != DType::f16) {
    fail("--half-dtype bf16 is not available yet: mixed-precision training has not landed");
  }
  if (p.loss_scale.dynamic || p.loss_scale.static_scale != 1.0f) {
    fail("loss scaling (--loss-scale and its tuning flags) is not available yet: it comes with "
         "mixed-precision training, which has not landed");
  }
}

void command_not_available(const char* command, const char* missing_piece) {
  fail("`alloy ", command, "` is not available yet: ", missing_piece, " has not landed");
}

}  // namespace alloy::app
