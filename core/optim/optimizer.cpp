#include "core/optim/optimizer.h"

#include "core/optim/adamw.h"
#include "core/optim/sgd.h"

namespace alloy::optim {

void Optimizer::check_common(const char* kind) const {
  if (!(config_.lr > 0.0f)) usage_fail(kind, ": lr must be > 0, got ", config_.lr);
  if (!(config_.weight_decay >= 0.0f)) {
    usage_fail(kind, ": weight_decay must be >= 0, got ", config_.weight_decay);
  }
  for (const nn::Parameter* param : params_) {
    ALLOY_CHECK(param != nullptr, kind, ": null parameter");
    // Half weights (O3, or O2 without masters) are updated in fp32 and rounded; the state
    // stays fp32 either way.
    ALLOY_CHECK(is_floating(param->value.dtype()), kind, ": parameter ", param->name, " is ",
                param->value.str(), "; optimizers update floating-point weights");
  }
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<nn::Parameter*> params) {
  if (config.kind == "sgd") return std::make_unique<Sgd>(std::move(params), config);
  if (config.kind == "adamw") return std::make_unique<AdamW>(std::move(params), config);
  usage_fail("unknown optimizer '", config.kind, "' (choices: sgd, adamw)");
}

}  // namespace alloy::optim
