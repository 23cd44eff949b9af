// Training of sequence models (`alloy train --model gpt...`): steps over random windows of a
// token stream (core/data/token_data.h), each forward -> tied head and loss in row chunks ->
// backward -> the amp layer's step (apps/train/train_step.h's order, with the GPT's loss in place
// of the classifier's), estimates of the validation loss every --eval-every steps, and the whole
// validation split's loss at the end. A step depends on (seed, step) only: its windows, its
// dropout masks (the optimizer's step count) and its learning rate, so a run resumed from a
// checkpoint continues bit for bit on the CPU.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "amp/mixed_precision.h"
#include "apps/train/data_parallel.h"
#include "apps/train/step_graph.h"
#include "apps/train/train_config.h"
#include "core/checkpoint/checkpoint.h"
#include "core/data/token_data.h"
#include "core/models/gpt.h"

namespace alloy::app {

class DataParallel;

// One training step of a GPT on a batch of windows (i32 [B, T] inputs and targets on the
// model's device): forward, the tied head's loss (added to `tally`) and gradient scaled by the
// loss scale, backward, data parallelism's gradient average (when `data_parallel` is given:
// the batch is then this rank's rows rank + W i of the global batch), the amp layer's step and
// zero_grad. Dropout masks follow the optimizer's step count and the row in the global batch.
// With `accumulation_steps` N the batch runs as N micro-batches (apps/train/micro_batches.h),
// forward and backward each, their gradients accumulating and each divided by the tokens of
// the whole step, then one amp step: the step's mean-loss gradient, up to rounding, with the
// same windows and dropout masks as one pass (1: one pass, bit for bit). With data parallelism
// one allreduce per step. label_smoothing: the loss's, as PyTorch's
// CrossEntropyLoss(label_smoothing) (0: none). What `alloy train` and `alloy mem` run.
void lm_train_step(models::Gpt& model, amp::MixedPrecision& precision, const Tensor& inputs,
                   const Tensor& targets, Tensor& tally, DataParallel* data_parallel = nullptr,
                   std::int64_t accumulation_steps = 1, float label_smoothing = 0.0f);

// The optimizer of sequence-model training: --optimizer with AdamW's --beta1, --beta2, --eps
// and weight decay on matrices and embeddings only.
optim::OptimizerConfig lm_optimizer_config(const TrainConfig& options);

class LmTrainer {
 public:
  // Builds the model of options.text.gpt (its vocabulary from a text corpus), checks the data
  // against it, places it on `device` and wraps it for the opt level.
  LmTrainer(const TrainConfig& options, Device device, data::TokenCorpus corpus);

  // Called after each step; returns true to stop (a checkpoint or a signal).
  using StepHook = std::function<bool()>;
  // Called with each validation estimate: (step, val_loss, train_loss since the last one).
  using EvalHook = std::function<void(std::int64_t, double, double)>;

  // Data parallelism: makes this trainer one replica over `group` (which must outlive it)
  // before training: rank 0's weights, this rank's rows of each global batch, gradients
  // averaged after each backward. Every rank evaluates the whole validation data.
  void join_data_parallel(parallel::ProcessGroup& group, const parallel::DdpOptions& options);
  int world_size() const;
  int rank() const;
  // Every rank's params digest, by rank (a collective).
  std::vector<std::string> gather_params_digests();

  // Trains until options.steps steps are done or the step hook stops it.
  void run(const StepHook& step_hook, const EvalHook& eval_hook);
  // One training step.
  void step();

  // The mean loss over --eval-batches batches of validation windows, the same windows at
  // every call.
  double estimate_val_loss();
  // The mean loss over every token of the validation split (consecutive windows).
  double val_loss();
  // The same with the weight averages of --ema-decay in place of the weights.
  double val_loss_ema();
  // The mean training loss of the steps since the last call (or the start), NaN when none.
  double take_train_loss();

  std::string params_digest();
  std::int64_t parameter_count();
  std::int64_t steps() const { return steps_; }
  // Tokens per second of the training steps this process ran (evaluation not counted).
  double tokens_per_second() const;
  const TrainConfig& options() const { return options_; }
  const models::GptConfig& config() const { return model_->config(); }
  const data::TokenCorpus& corpus() const { return corpus_; }
  models::Gpt& model() { return *model_; }
  amp::MixedPrecision& precision() { return *precision_; }
  Device device() const { return device_; }
  // The kernel the attention ops run (core/ops/attention_kernel.h): "alloy" or "cudnn". On a
  // GPU this settles --attention-kernel for the run's shape (building cuDNN's plans); an
  // explicit cudnn that cannot run throws (a usage error for fp32 or attention dropout).
  const char* attention_kernel_in_use();

  // --cuda-graph (apps/train/step_graph.h): whether the training step is captured after its
  // warm-up steps and replayed, planned at the first call (after join_data_parallel; a
  // UsageError for --cuda-graph on that cannot capture); else why it runs eagerly. A run on
  // the CPU, off, or over Gloo steps eagerly.
  bool cuda_graph();
  const std::string& cuda_graph_reason() const { return cuda_graph_reason_; }
  // A line for the user when one is due (capture failed: the steps now run eagerly), once.
  std::optional<std::string> take_cuda_graph_notice();

  // Checkpoints: the state to save, and a saved state put back (Error naming `path` when it
  // does not fit this run).
  checkpoint::CheckpointState capture();
  // `warn` hears of weight averages the file lacks or this run does not keep.
  void restore(const checkpoint::CheckpointState& state, const std::string& path,
               const std::function<void(const std::string&)>& warn = {});

 private:
  Tensor to_device(const Tensor& host) const;
  double mean_loss(const Tensor& tally, std::int64_t rows) const;

  TrainConfig options_;
  Device device_;
  data::TokenCorpus corpus_;
  std::unique_ptr<models::Gpt> model_;
  std::unique_ptr<amp::MixedPrecision> precision_;
  std::int64_t steps_ = 0;
  Tensor tally_;  // the training loss since take_train_loss
  std::int64_t tally_rows_ = 0;
  double train_seconds_ = 0;
  std::int64_t trained_tokens_ = 0;  // over every rank
  std::unique_ptr<DataParallel> data_parallel_;
  bool cuda_graph_planned_ = false;
  std::unique_ptr<StepGraph> step_graph_;
  std::string cuda_graph_reason_;
};

// The GPT a checkpoint of a sequence model holds: its shape and its text vocabulary (empty for
// token-file data). Error naming `path` for a checkpoint of another model.
models::GptConfig gpt_config_of(const checkpoint::CheckpointState& state, const std::string& path);
std::string vocabulary_of(const checkpoint::CheckpointState& state);

// alloy mem's steps of a sequence model (apps/train/memory_report.h's measure_level): builds the
// GPT of config.gpt and the amp layer, calls steady_state() once they and a batch of
// config.batch_size random windows are in place, then runs config.steps lm_train_steps, and frees
// everything.
struct GptMeasurement {
  std::int64_t parameter_count = 0;
  double timed_seconds = 0;  // the steps after the first (the only one when steps == 1)
};
struct MeasureConfig;
GptMeasurement measure_gpt_steps(const MeasureConfig& config, const amp::AmpProperties& properties,
                                 const std::function<void()>& steady_state);

// Loads dataset text, tokens or synthetic for a sequence model.
data::TokenCorpus load_token_corpus(const TrainConfig& options);

}  // namespace alloy::app
