#include "apps/train/weight_averages.h"

#include <vector>

#include "core/error.h"
#include "core/ops/elementwise.h"

namespace alloy::app {

void with_weight_averages(nn::Module& model, amp::MixedPrecision& precision,
                          const std::function<void()>& work) {
  ALLOY_CHECK(precision.ema_decay() > 0.0f, "with_weight_averages: the run keeps no averages");
  std::vector<Tensor*> targets;
  std::vector<const Tensor*> averages;
  const std::vector<nn::Parameter*> params = model.parameters();  // the canonical order
  for (std::size_t i = 0; i < params.size(); ++i) {
    targets.push_back(&params[i]->value);
    averages.push_back(&precision.ema_parameters()[i]);
  }
  const std::vector<nn::Buffer*> buffers = model.buffers();
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    targets.push_back(&buffers[i]->value);
    averages.push_back(&precision.ema_buffers()[i]);
  }
  std::vector<Tensor> trained;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    trained.push_back(targets[i]->clone(MemoryCategory::workspace));
    targets[i]->copy_from(targets[i]->dtype() == DType::f32
                              ? *averages[i]
                              : cast(*averages[i], targets[i]->dtype(), MemoryCategory::workspace));
  }
  const auto restore = [&] {
    for (std::size_t i = 0; i < targets.size(); ++i)
      targets[i]->copy_from(trained[i]);
  };
  try {
    work();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

}  // namespace alloy::app
