// Optimizers over a list of parameters whose values are f32 (the model's own parameters at
// O0/O1, the fp32 masters at O2). Gradients may be f32 or half. Each step is the fused
// per-tensor update of core/ops/optimizer_update.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/nn/module.h"

namespace alloy::optim {

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd | adamw
  float lr = 0.1f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
};

// A named state tensor, for checkpoints: "<param name>.momentum_buffer", ".exp_avg", ...
struct StateTensor {
  std::string name;
  Tensor* value;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // grad_scale multiplies gradients before use (1/loss scale when they are still scaled).
  // found_inf (f32 [1], optional): when nonzero on the device, the step does nothing.
  virtual void step(float grad_scale = 1.0f, const Tensor& found_inf = {}) = 0;

  // Every state tensor, allocating lazily-created ones so a checkpoint can restore them.
  virtual std::vector<StateTensor> state() = 0;

  // Calls to step(), including those found_inf skipped: the host cannot tell them apart
  // without a sync, so AdamW's bias correction counts them too.
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }
  const OptimizerConfig& config() const { return config_; }
  void set_lr(float lr) { config_.lr = lr; }

 protected:
  Optimizer(std::vector<nn::Parameter*> params, OptimizerConfig config)
      : params_(std::move(params)), config_(std::move(config)) {}

  // The checks every kind shares: lr > 0 and weight_decay >= 0 (UsageError), and parameters
  // that are f32 and not null (Error). `kind` starts the messages.
  void check_common(const char* kind) const;

  std::vector<nn::Parameter*> params_;
  OptimizerConfig config_;
  std::int64_t steps_ = 0;
};

// Throws UsageError for an unknown kind or invalid hyper-parameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<nn::Parameter*> params);

}  // namespace alloy::optim
