#include "apps/train/recompute.h"

#include <algorithm>

#include "core/error.h"
#include "core/setting_error.h"

namespace alloy::app {

const std::vector<std::string>& recompute_choices() {
  static const std::vector<std::string> choices = {"none", "blocks"};
  return choices;
}

void check_recompute_choice(const std::string& recompute) {
  const auto& choices = recompute_choices();
  if (std::find(choices.begin(), choices.end(), recompute) == choices.end()) {
    setting_fail("{recompute} '", recompute, "' is not one of none or blocks");
  }
}

void apply_recompute(nn::Module& model, const std::string& model_name,
                     const std::string& recompute) {
  check_recompute_choice(recompute);
  const bool blocks = recompute == "blocks";
  if (model.recompute_blocks(blocks) == 0 && blocks) {
    setting_fail("{recompute} blocks: model '", model_name,
                 "' has no blocks to recompute (a block is an nn::Module whose is_block() is true, "
                 "such as resnet18's residual blocks, held by an nn::Sequential)");
  }
}

}  // namespace alloy::app
