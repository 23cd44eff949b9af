// The amp layer around a model and its optimizer: casts the model for the opt level, keeps
// fp32 master weights when the level asks for them, and runs the training step:
//   unscale -> [gradient-norm clip coefficient, when on] -> optimizer step.
// With masters (O2) the unscale pass only checks: it reads the half gradients, sets found_inf
// on the device (a dynamic scaler's update runs in the same pass) and leaves 1/scale there; a
// master's gradient is its half model weight's gradient, still scaled, and no fp32 copy of the
// gradients exists. The clip computes the norm of the half gradients times 1/scale (each
// product rounded to f32, summed in double), and the update multiplies each gradient by 1/scale,
// then by the clip coefficient, as it reads it: the same f32 values, in the same order, as fp32
// master gradients unscaled beforehand, so the bits are theirs. Without masters (O1, and O0 or
// O3 with a loss scale other than 1) the pass unscales the gradients in place. The update skips
// itself when found_inf is set, and at O2 also rounds the updated masters into the half model
// in the same pass.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amp/loss_scaler.h"
#include "amp/opt_level.h"
#include "core/nn/module.h"
#include "core/optim/optimizer.h"

namespace alloy::amp {

class MixedPrecision {
 public:
  // Casts `model` in place per the properties (it must still be fp32) and builds the
  // optimizer over the canonical fp32 weights.
  MixedPrecision(const AmpProperties& properties, nn::Module& model,
                 const optim::OptimizerConfig& optimizer_config);

  const AmpProperties& properties() const { return properties_; }
  // The dtype images are fed to the model in.
  DType input_dtype() const { return properties_.model_dtype; }

  // f32 [1] on the model's device: the factor the loss gradient is multiplied by.
  const Tensor& loss_scale() const { return scaler_.scale(); }
  LossScaler& scaler() { return scaler_; }
  optim::Optimizer& optimizer() { return *optimizer_; }

  // After backward: the whole amp step. The model's gradients are left to the caller to zero.
  void step();

  // Sharded training (ZeRO stage 1, apps/train/zero.h) takes the step over: from here on
  // optimizer() is `optimizer` (over this rank's shard of the canonical weights) and step() runs
  // `step` instead of the pass above. The fp32 master weights are released (the shard keeps
  // its part of them): canonical_parameters() keeps their names, with undefined values.
  void hand_over_step(std::unique_ptr<optim::Optimizer> optimizer, std::function<void()> step);

  // Gradient-norm clipping, as torch.nn.utils.clip_grad_norm_(params, max_norm) after
  // scaler.unscale_(optimizer): on the gradients the optimizer reads, unscaled (at O2 the half
  // gradients times 1/scale as the update reads them; the gradients unscaled in place at O1; the
  // raw ones at O0 and O3). Each step then computes their total L2 norm and the coefficient
  // min(max_norm / (norm + 1e-6), 1) on the device right after the unscale pass
  // (core/ops/clip_grad_norm.h), and the optimizer's update multiplies every gradient by it: no
  // host sync, no extra pass over the gradients. A step the dynamic scaler skips is not counted.
  // 0 (the default) turns clipping off; max_norm must be finite and >= 0 (UsageError). Call it
  // outside a CUDA-graph capture: it allocates the clip's device scalars.
  void set_clip_grad_norm(float max_norm);
  float clip_grad_norm() const { return clip_max_norm_; }
  // While clipping is on, on the model's device: the latest step's norm and coefficient (f32
  // [1]) and the tally every step adds to (core/ops/clip_grad_norm.h; reset it in place, with
  // copy_from, as a captured step adds to its address). Undefined while clipping is off.
  const Tensor& clip_norm() const { return clip_norm_; }
  const Tensor& clip_coefficient() const { return clip_coefficient_; }
  Tensor& clip_tally() { return clip_tally_; }

  // An exponential moving average of the weights (--ema-decay; timm's ModelEmaV2): fp32
  // averages of every canonical parameter and every buffer of the model (batch norm's running
  // statistics, so that the averaged model evaluates without another pass), starting from their
  // values now; after each step the optimizer applies, on the device and in the same stream,
  // average = decay * average + (1 - decay) * weight (core/ops/ema_update.h). A step the
  // dynamic scaler skips skips the average too (the weights did not change). decay in [0, 1)
  // (UsageError otherwise); 0 (the default) turns it off and frees the averages. Call it
  // outside a CUDA-graph capture: it allocates.
  void set_ema_decay(float decay);
  float ema_decay() const { return ema_decay_; }
  // With warm-up, the update that makes n applied optimizer steps uses
  // min(decay, (1 + n) / (10 + n)) (core/ops/ema_update.h: warmed_up_decay), n read from the
  // optimizer's step count on the device, so the averages do not carry the initial weights for
  // thousands of steps. Off by default.
  void set_ema_warmup(bool warmup) { ema_warmup_ = warmup; }
  bool ema_warmup() const { return ema_warmup_; }
  // The averages restart from the weights as they are now (after a resume from a checkpoint
  // without averages, or rank 0's weights arriving in a data-parallel run).
  void reset_ema();
  // The averages, in the order of canonical_parameters() and of the model's buffers(); empty
  // when off.
  const std::vector<Tensor>& ema_parameters() const { return ema_parameters_; }
  const std::vector<Tensor>& ema_buffers() const { return ema_buffers_; }
  // The averages as named state for checkpoints: "ema.<parameter or buffer name>".
  std::vector<optim::StateTensor> ema_state();

  // The weights training really updates, in canonical (registration) order: the fp32 masters
  // where the level keeps them, the model's own parameters otherwise. Checkpoints and the
  // params digest use these.
  std::vector<nn::Parameter*> canonical_parameters();
  // Rounds the canonical weights into the model after they were overwritten (resume).
  void sync_model_from_masters();

  // The qualified name of the index-th parameter (as reported by first_overflow).
  const std::string& parameter_name(int index) const;

 private:
  AmpProperties properties_;
  std::vector<nn::Parameter*> model_params_;
  std::vector<nn::Buffer*> buffers_;  // the model's, whose values the averages follow too
  // One per model parameter that has a half value and master weights on; empty otherwise.
  std::vector<std::unique_ptr<nn::Parameter>> masters_;
  std::vector<nn::Parameter*> canonical_;
  LossScaler scaler_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::function<void()> handed_over_step_;  // empty unless hand_over_step was called
  bool needs_unscale_ = false;
  // Fixed lists for the fused passes, built once: every model gradient, and where it is
  // unscaled in place (empty with masters, whose pass only checks).
  std::vector<const Tensor*> unscale_inputs_;
  std::vector<Tensor*> unscale_outputs_;
  // Each master's gradient and the model gradient it is during a step.
  std::vector<std::pair<Tensor*, const Tensor*>> master_grads_;
  // With masters: f32 [1], the inverse of the scale this step's gradients carry, written by the
  // check pass; the clip and the update apply it. Undefined without masters.
  Tensor grad_unscale_;
  // sync_model_from_masters's copy (a step's is written by the optimizer's update).
  std::vector<const Tensor*> copy_sources_;
  std::vector<Tensor*> copy_targets_;
  // Gradient-norm clipping; max norm 0: off, and the tensors undefined.
  float clip_max_norm_ = 0.0f;
  Tensor clip_norm_;
  Tensor clip_coefficient_;
  Tensor clip_tally_;
  // Weight averaging; decay 0: off, and the lists empty.
  float ema_decay_ = 0.0f;
  bool ema_warmup_ = false;
  std::vector<Tensor> ema_parameters_;
  std::vector<Tensor> ema_buffers_;
  std::vector<std::string> ema_names_;  // parameters', then buffers'
};

}  // namespace alloy::amp
