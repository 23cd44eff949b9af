// The training loop of `alloy train`, independent of the command line's output so tests can
// drive it. One step is forward -> loss -> backward -> optimizer step (apps/train/train_step.h);
// the amp layer (amp::MixedPrecision) owns the optimizer and the loss scale, so opt levels,
// checkpoints and data parallelism attach at those seams.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/mixed_precision.h"
#include "apps/train/data_parallel.h"
#include "apps/train/overflow_monitor.h"
#include "apps/train/step_graph.h"
#include "apps/train/train_config.h"
#include "core/data/batch_stager.h"
#include "core/data/dataset.h"
#include "core/data/loader.h"
#include "core/data/sampler.h"
#include "core/nn/module.h"
#include "core/ops/clip_grad_norm.h"
#include "core/ops/softmax_cross_entropy.h"
#include "core/round_trips.h"

namespace alloy::app {

// One epoch's figures; the JSON log's epoch event has exactly these.
struct EpochStats {
  std::int64_t epoch = 0;  // 1-based
  std::int64_t step = 0;   // steps taken since the start of training
  double train_loss = 0;   // mean over the epoch's examples
  double train_acc = 0;
  double test_acc = 0;
  double epoch_seconds = 0;  // the training steps only; evaluation is not counted
  double images_per_second = 0;
  double loss_scale = 1;
  std::int64_t skipped_steps = 0;
  float lr = 0;  // the rate of the epoch's last step (the schedule's, when there is one)
  std::int64_t peak_memory_bytes = 0;  // on the training device, during the epoch
  // With --clip-grad-norm (clipping true): the mean total gradient norm over the epoch's steps
  // whose norm was finite (NaN when none was), and the steps whose clip coefficient was below 1.
  // A resumed epoch counts its steps before the checkpoint too (EpochProgress::clip).
  bool clipping = false;
  double grad_norm = 0;
  std::int64_t clipped_steps = 0;
  // With --ema-decay (ema true): the test accuracy of the averaged weights.
  bool ema = false;
  double test_acc_ema = 0;
  // Host round trips of the epoch's training steps (core/round_trips.h), summed over
  // Trainer::last_step_round_trips(); evaluation and checkpoints are not counted.
  RoundTrips round_trips;
};

// Where training stands inside the epoch in progress: the sampler position and the sums
// behind the epoch's figures. A checkpoint carries it, so a run resumed mid-epoch visits the
// same batches and reports the same train_loss as the run that was never stopped.
struct EpochProgress {
  std::int64_t batches = 0;  // steps taken in this epoch
  std::int64_t images = 0;   // examples visited in this epoch: where the loader resumes
  std::int64_t correct = 0;
  double loss_sum = 0;  // sum of per-example losses, in double
  ClipTally clip;       // with --clip-grad-norm: the epoch's clip figures so far
};

// Hooks for progress display and logging; the trainer calls them in order.
class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void on_epoch_begin(std::int64_t /*epoch*/, std::int64_t /*batches*/) {}
  // After each step: batches and images done in this epoch and seconds so far. The epoch's
  // mean loss lives on the training device: `mean_loss()` reads it (and waits for the device),
  // so call it only when the figure will be shown.
  virtual void on_step(std::int64_t /*batches*/, std::int64_t /*images*/, double /*seconds*/,
                       const std::function<double()>& /*mean_loss*/) {}
  virtual void on_epoch_end(const EpochStats& /*stats*/) {}
  // A rate-limited warning (gradient overflow); the default prints it to standard error.
  virtual void on_warning(const std::string& message);
};

class Trainer {
 public:
  // Builds the model from options.seed, places it on `device` and wraps it for the options'
  // opt level. `data` is kept for the trainer's lifetime.
  Trainer(const TrainConfig& options, Device device, data::DatasetPair data);

  // Trains options.epochs epochs, evaluating on the test set after each, or up to
  // options.steps steps: an epoch the bound ends early is evaluated and reported as the ones
  // before it, and stays in progress (a checkpoint of it resumes mid-epoch).
  void run(TrainObserver& observer);

  // One pass over the training set (epoch is 0-based), then evaluation.
  EpochStats train_epoch(std::int64_t epoch, TrainObserver& observer);

  // Fraction of `dataset` classified correctly, in evaluation mode.
  double evaluate(const data::Dataset& dataset);
  // The accuracy of the weight averages (--ema-decay): they stand in for the model's weights
  // and buffers during the evaluation, which then get their own values back.
  double evaluate_ema(const data::Dataset& dataset);

  // Whether the training step is captured as a CUDA graph after warm-up (--cuda-graph;
  // apps/train/step_graph.h). Decided on the first call, once data parallelism is settled: a
  // UsageError for --cuda-graph on where the step cannot be captured.
  bool cuda_graph();
  // The step's graph when cuda_graph() is true, else null.
  const StepGraph* step_graph() const { return step_graph_.get(); }
  // Why the step runs eagerly, once cuda_graph() is false ("" before).
  const std::string& cuda_graph_reason() const { return cuda_graph_reason_; }

  // The fingerprint of the canonical (fp32 master) weights; see core/digest.h.
  std::string params_digest();

  std::int64_t parameter_count();
  std::int64_t steps() const { return steps_; }
  std::int64_t epochs_done() const { return epochs_done_; }
  double last_test_acc() const { return last_test_acc_; }
  double last_test_acc_ema() const { return last_test_acc_ema_; }
  const data::DatasetPair& data() const { return data_; }
  Device device() const { return device_; }
  nn::Module& model() { return *model_; }

  // Data parallelism (apps/train/data_parallel.h): makes this trainer one replica of the job over
  // `group` (which must outlive it), before training starts. It takes rank 0's weights, trains
  // on this rank's shard with its share of the global --batch-size, averages gradients over
  // the ranks after each backward, and evaluates on a shard with the accuracy reduced over
  // every rank.
  void join_data_parallel(parallel::ProcessGroup& group, const parallel::DdpOptions& options);
  // Every rank's params digest, by rank: a collective that every rank calls.
  std::vector<std::string> gather_params_digests();
  int world_size() const { return data_parallel_ ? data_parallel_->world_size() : 1; }
  DataParallel* data_parallel() { return data_parallel_.get(); }

  // Checkpoint seams (apps/train/training_state.h). A hook runs after every step, and after every
  // epoch once the observer has seen it; when it returns true, training stops right there.
  using StopHook = std::function<bool()>;
  void set_step_hook(StopHook hook) { step_hook_ = std::move(hook); }
  void set_epoch_hook(StopHook hook) { epoch_hook_ = std::move(hook); }
  // Whether a hook stopped training before options.epochs were done.
  bool stopped() const { return stopped_; }
  // Whether the run has taken the --steps it is bounded to (never without a bound).
  bool step_limit_reached() const { return options_.steps > 0 && steps_ >= options_.steps; }
  const TrainConfig& options() const { return options_; }
  amp::MixedPrecision& precision() { return *precision_; }
  // The epoch in progress, its sums read from the device (a wait for the device).
  EpochProgress epoch_progress();
  // epoch_progress() without the wait: while an epoch runs, its loss_sum and correct stay on the
  // training device in `tally` (core/ops/step_tally.h), and with clipping its clip figures in
  // `clip_tally` (core/ops/clip_grad_norm.h), for the caller to copy, and are zero in the
  // result; otherwise both are left undefined and the result is complete.
  EpochProgress epoch_progress_on_device(Tensor& tally, Tensor& clip_tally) const;
  // Host round trips of the latest training step: from the end of the step before (the start
  // of the epoch for its first) to the overflow monitor's check after it, leaving out the
  // observer's on_step and the step hook. A step's window holds the upload of the batch after
  // it (the first also its own; the last none), queued while it runs.
  const RoundTrips& last_step_round_trips() const { return last_step_round_trips_; }
  // Steps taken in the epoch in progress; known on the host, no wait.
  std::int64_t epoch_batches_done() const { return progress_.batches; }
  // Batches of the epoch in progress, counting those done before a resume.
  std::int64_t epoch_batches() const { return epoch_batches_; }
  // The staging of training batches (its busy_waits() among others).
  const data::BatchStager& stager() const { return stager_; }
  // Puts the trainer where a checkpoint left off: `epochs_done` complete epochs, `steps`
  // optimizer steps, and `progress` into the next epoch.
  void set_position(std::int64_t epochs_done, std::int64_t steps, const EpochProgress& progress);

 private:
  void step(const data::Batch& batch);  // a batch on the training device
  // The step's device work, eager or under capture: apps/train/train_step.h, which `alloy mem`
  // runs.
  void device_step(const Tensor& images, const Tensor& labels);
  Tensor forward(const Tensor& images);  // evaluation's

  Tensor to_device(const Tensor& host) const;  // evaluation's synchronous upload
  std::int64_t local_batch_size() const;       // this rank's share of options_.batch_size
  // The optimizer's schedule for --lr-schedule and --warmup-steps; nullopt for a fixed rate.
  std::optional<LrSchedule> lr_schedule() const;

  TrainConfig options_;
  Device device_;
  data::BatchStager stager_;  // training batches to the device
  data::DatasetPair data_;
  std::unique_ptr<nn::Module> model_;
  std::unique_ptr<amp::MixedPrecision> precision_;
  Tensor
      normalization_;  // --normalize's table on device_, or undefined (apps/train/normalization.h)
  OverflowMonitor overflow_;
  data::Sampler sampler_;
  std::int64_t steps_ = 0;
  std::int64_t epochs_done_ = 0;
  double last_test_acc_ = 0;
  double last_test_acc_ema_ = 0;
  // Batches and images on the host; loss_sum and correct are in tally_ during an epoch.
  EpochProgress progress_;
  Tensor tally_;                 // core/ops/step_tally.h, on the training device; one per trainer
  bool tally_in_epoch_ = false;  // whether tally_ holds the sums of an epoch in progress
  std::int64_t epoch_batches_ = 0;
  RoundTrips last_step_round_trips_;
  StopHook step_hook_;
  StopHook epoch_hook_;
  bool stopped_ = false;
  bool cuda_graph_planned_ = false;
  std::unique_ptr<StepGraph> step_graph_;
  std::string cuda_graph_reason_;
  // Last, so that it goes first: it unhooks itself from the model.
  std::unique_ptr<DataParallel> data_parallel_;
};

}  // namespace alloy::app
