// Optimizers over a list of parameters whose values are f32 (the model's own parameters at
// O0/O1, the fp32 masters at O2) or half (O3). Gradients may be f32 or half (at O2 a master's
// gradient is its half model weight's). Each step is one
// fused multi-tensor update over every parameter (core/ops/optimizer_update.h), which reads
// the learning rate and the step count from the optimizer's scalars on the parameters' device:
// the host writes them only when they change, and a step captured in a CUDA graph replays
// with current values.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/nn/module.h"
#include "core/ops/lr_schedule.h"

namespace alloy::optim {

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd | adamw
  float lr = 0.1f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  // Round half parameters (no fp32 master) stochastically, the random words keyed by
  // rounding_key (core/ops/optimizer_update.h); f32 parameters are unaffected.
  bool stochastic_rounding = false;
  std::uint64_t rounding_key = 0;
  // AdamW: weight decay on parameters of two or more dimensions only (matrices and embedding
  // tables), none on biases and normalisation weights: nanoGPT's two parameter groups.
  bool decay_matrices_only = false;
};

// A named state tensor, for checkpoints: "<param name>.momentum_buffer", ".exp_avg", ...
struct StateTensor {
  std::string name;
  Tensor* value;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // grad_scale multiplies gradients before use (1/loss scale when they are still scaled); it
  // is a kernel argument, so a captured CUDA graph replays the value it was captured with.
  // found_inf (f32 [1], optional): when nonzero on the device, the step does nothing, and does
  // not count as a step. grad_factor (f32 [1], optional): a further multiplier of the gradients
  // read on the device, e.g. gradient-norm clipping's coefficient (core/ops/clip_grad_norm.h).
  // grad_unscale (f32 [1], optional): read on the device too and applied before grad_factor,
  // each product rounded on its own (core/ops/optimizer_update.h): O2's 1/loss scale of the
  // half gradients, which no pass has unscaled.
  virtual void step(float grad_scale = 1.0f, const Tensor& found_inf = {},
                    const Tensor& grad_factor = {}, const Tensor& grad_unscale = {}) = 0;

  // Every state tensor, allocating lazily-created ones so a checkpoint can restore them.
  virtual std::vector<StateTensor> state() = 0;

  // Updates applied so far: steps that found_inf skipped do not count (nor in AdamW's bias
  // correction), as in Apex and PyTorch's GradScaler. The count lives on the parameters' device
  // and the update advances it there; steps() is a download and set_steps an upload, for
  // checkpoints and logging, never inside a training step. set_steps takes 0 .. 2^31 - 2.
  std::int64_t steps() const;
  void set_steps(std::int64_t steps);
  // The count where it lives: i32 [2] on the parameters' device, the count first. For a
  // snapshot that copies it without waiting (steps() waits).
  const Tensor& step_count() const { return step_; }

  const OptimizerConfig& config() const { return config_; }
  // Uploads the new rate (one float) for the following steps; UsageError unless lr > 0. With a
  // schedule, the new rate is the schedule's base.
  void set_lr(float lr);
  // From the next step on, each step first computes its rate from the schedule and the step
  // count, on the device (core/ops/lr_schedule.h); the schedule's base_lr is the config's lr.
  // nullopt: the fixed rate of set_lr.
  void set_schedule(std::optional<LrSchedule> schedule);
  const std::optional<LrSchedule>& schedule() const { return schedule_; }
  // The rate the last step used (or the next one will, before any): a download, for logs and
  // reports, never inside a training step.
  float current_lr() const;

  // Where each step also writes the updated parameters rounded to another dtype, in the same
  // pass: copies[i] (or nothing where null) receives parameter i's new value. O2 uses it for
  // the half model weights of the fp32 masters (Apex's fused optimizers write the model copy),
  // which saves the separate master -> model pass. Each copy has its parameter's shape and
  // device, and its parameter is f32; one entry per parameter.
  void write_copies_to(std::vector<Tensor*> copies);

 protected:
  // Checks what every kind shares: lr > 0 and weight_decay >= 0 (UsageError), and parameters
  // that are floating-point and not null (Error); `kind` starts the messages. Places the
  // scalars on the first parameter's device.
  Optimizer(const char* kind, std::vector<nn::Parameter*> params, OptimizerConfig config);

  std::vector<nn::Parameter*> params_;
  OptimizerConfig config_;
  Tensor lr_;    // f32 [1]
  Tensor step_;  // i32 [2]: the count, and the CUDA kernels' finished-block tickets (zero)
  std::vector<Tensor*> copies_;  // empty, or one (possibly null) per parameter

  std::optional<LrSchedule> schedule_;

  // Each kind's step() calls it before its update: writes the scheduled rate into lr_.
  void prepare_lr();
  Tensor* copy_of(std::size_t index) const { return copies_.empty() ? nullptr : copies_[index]; }
};

// Throws UsageError for an unknown kind or invalid hyper-parameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config,
                                          std::vector<nn::Parameter*> params);

}  // namespace alloy::optim
