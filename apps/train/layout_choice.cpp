#include "apps/train/layout_choice.h"

#include "core/error.h"
#include "core/setting_error.h"

namespace alloy::app {

void check_layout_choice(const std::string& flag) {
  if (flag != "auto" && flag != "nchw" && flag != "nhwc")
    setting_fail("{layout} '", flag, "' is not one of auto, nchw or nhwc");
}

Layout choose_layout(const std::string& flag, const std::string& model_name,
                     const nn::Module& model, bool cuda, const amp::AmpProperties& precision) {
  check_layout_choice(flag);
  if (flag == "nchw") return Layout::nchw;
  const bool region = model.has_layout_region();
  if (flag == "nhwc") {
    if (!region) {
      setting_fail("{layout} nhwc: model '", model_name,
                   "' has no layout region (nn::EnterLayout ... nn::LeaveLayout) and runs NCHW "
                   "only");
    }
    return Layout::nhwc;
  }
  const bool half_convolutions = precision.cast_policy || precision.model_dtype != DType::f32;
  return region && cuda && half_convolutions ? Layout::nhwc : Layout::nchw;
}

}  // namespace alloy::app
