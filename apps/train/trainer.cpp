#include "apps/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

#include "apps/train/layout_choice.h"
#include "apps/train/micro_batches.h"
#include "apps/train/normalization.h"
#include "apps/train/recompute.h"
#include "apps/train/train_step.h"
#include "apps/train/weight_averages.h"
#include "core/digest.h"
#include "core/models/models.h"
#include "core/nn/cast_policy.h"
#include "core/ops/allow_tf32.h"
#include "core/ops/attention_kernel.h"
#include "core/ops/clip_grad_norm.h"
#include "core/ops/conv2d_algorithm_db.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax_cross_entropy.h"
#include "core/ops/step_tally.h"
#include "core/random.h"
#include "core/setting_error.h"

namespace alloy::app {

namespace {

optim::OptimizerConfig optimizer_config(const TrainConfig& o) {
  optim::OptimizerConfig config;
  config.kind = o.optimizer;
  config.lr = static_cast<float>(o.lr);
  config.momentum = static_cast<float>(o.momentum);
  config.weight_decay = static_cast<float>(o.weight_decay);
  config.stochastic_rounding = o.stochastic_rounding;
  config.rounding_key = static_cast<std::uint64_t>(o.seed);
  return config;
}

// The model for the training set's images and classes.
std::unique_ptr<nn::Module> build_model(const TrainConfig& o, Device device,
                                        const data::Dataset& train) {
  Generator generator(static_cast<std::uint64_t>(o.seed));
  auto model = models::make_model(o.model, generator, train.classes,
                                  models::image_shape_of(train.example_shape()));
  model->to_device(device);
  model->set_needs_input_grad(false);  // nothing consumes the gradient of the images
  model->set_layout(choose_layout(o.layout, o.model, *model, device.is_cuda(), o.precision));
  apply_recompute(*model, o.model, o.recompute);
  return model;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void TrainObserver::on_warning(const std::string& message) {
  std::cerr << "alloy: warning: " << message << std::endl;
}

Trainer::Trainer(const TrainConfig& options, Device device, data::DatasetPair data)
    : options_(options),
      device_(device),
      stager_(device),
      data_(std::move(data)),
      model_(build_model(options, device, data_.train)),
      precision_(std::make_unique<amp::MixedPrecision>(options.precision, *model_,
                                                       optimizer_config(options))),
      normalization_(normalization_table(
          parse_normalization(options.normalize, static_cast<int>(data_.train.example_shape()[0])),
          device)),
      overflow_(
          precision_->scaler(), [this](int index) { return precision_->parameter_name(index); },
          OverflowMonitor::kDefaultInterval,
          options.max_consecutive_skips < 0
              ? std::nullopt
              : std::optional<std::int64_t>(options.max_consecutive_skips)),
      sampler_(data_.train.size(), static_cast<std::uint64_t>(options.seed), /*shuffle=*/true) {
  ALLOY_CHECK(data_.train.size() > 0, "the training set ", data_.train.name, " is empty");
  micro_batch_size(options_.batch_size, 1, options_.accumulation_steps);  // a UsageError if uneven
  nn::CastPolicy policy;
  policy.enabled = options_.precision.cast_policy;
  policy.half_dtype = options_.precision.half_dtype;
  nn::set_cast_policy(policy);
  // --conv-algorithms: process-wide in the CUDA backend, like the cast policy; the CPU's
  // convolutions have no algorithms to choose.
  if (device_.is_cuda()) {
    if (options_.conv_algorithms != "heuristic" && options_.conv_algorithms != "measured") {
      setting_failure("{conv_algorithms} '", options_.conv_algorithms,
                      "' is not one of heuristic or measured");
    }
    cuda::set_conv_algorithm_choice(options_.conv_algorithms == "measured"
                                        ? cuda::ConvAlgorithmChoice::measured
                                        : cuda::ConvAlgorithmChoice::heuristic);
  }
  // --allow-tf32: process-wide too, read by the CUDA GEMMs and convolutions (the CPU computes
  // fp32 in fp32 either way).
  set_allow_tf32(options_.allow_tf32);
  // --attention-kernel: process-wide, read by the attention ops (no image model has any).
  set_attention_kernel(parse_attention_kernel(options_.attention_kernel));
  precision_->set_clip_grad_norm(static_cast<float>(options_.clip_grad_norm));
  precision_->set_ema_decay(static_cast<float>(options_.ema_decay));
  precision_->set_ema_warmup(options_.ema_warmup);
}

void Trainer::run(TrainObserver& observer) {
  cuda_graph();  // --cuda-graph on that cannot be honoured fails before the first step
  // Known only now: data parallelism changes the steps per epoch.
  precision_->optimizer().set_schedule(lr_schedule());
  for (std::int64_t epoch = epochs_done_;
       epoch < options_.epochs && !stopped_ && !step_limit_reached(); ++epoch) {
    const EpochStats stats = train_epoch(epoch, observer);
    if (stopped_) break;  // mid-epoch: the epoch is not over, so it is not reported
    observer.on_epoch_end(stats);
    if (epoch_hook_ && epoch_hook_()) {
      stopped_ = epochs_done_ < options_.epochs && !step_limit_reached();
    }
  }
}

void Trainer::set_position(std::int64_t epochs_done, std::int64_t steps,
                           const EpochProgress& progress) {
  ALLOY_CHECK(epochs_done >= 0 && steps >= 0 && progress.batches >= 0 && progress.images >= 0 &&
                  progress.images <= sampler_.per_rank(),
              "cannot resume at epoch ", epochs_done, ", step ", steps, ", example ",
              progress.images, " of an epoch of ", sampler_.per_rank());
  epochs_done_ = epochs_done;
  steps_ = steps;
  progress_ = progress;
}

std::optional<LrSchedule> Trainer::lr_schedule() const {
  if (options_.lr_schedule == "constant" && options_.warmup_steps == 0) return std::nullopt;
  LrSchedule schedule;
  schedule.decay = parse_lr_decay(options_.lr_schedule);
  schedule.min_lr = static_cast<float>(options_.min_lr);
  schedule.warmup_steps = options_.warmup_steps;
  const std::int64_t batch = local_batch_size();
  schedule.total_steps = options_.epochs * ((sampler_.per_rank() + batch - 1) / batch);
  if (options_.steps > 0) schedule.total_steps = std::min(schedule.total_steps, options_.steps);
  return schedule;
}

bool Trainer::cuda_graph() {
  if (!cuda_graph_planned_) {
    // A group of one rank (--dist-backend at world size 1) is data parallelism too.
    step_graph_ = make_step_graph(options_, device_, world_size(), data_parallel_ != nullptr,
                                  cuda_graph_reason_);
    if (step_graph_ && data_parallel_ && data_parallel_->zero()) {
      step_graph_.reset();
      cuda_graph_reason_ = "the sharded step of zero 1 runs eagerly";  // on is refused earlier
    }
    cuda_graph_planned_ = true;
  }
  return step_graph_ != nullptr;
}

EpochProgress Trainer::epoch_progress() {
  if (!tally_in_epoch_) return progress_;
  const StepTally tally = read_step_tally(tally_);
  progress_.loss_sum = tally.loss_sum;
  progress_.correct = static_cast<std::int64_t>(tally.correct);
  if (precision_->clip_grad_norm() > 0.0f)
    progress_.clip = read_clip_tally(precision_->clip_tally());
  return progress_;
}

EpochProgress Trainer::epoch_progress_on_device(Tensor& tally, Tensor& clip_tally) const {
  EpochProgress progress = progress_;
  tally = Tensor();
  clip_tally = Tensor();
  if (tally_in_epoch_) {
    tally = tally_;
    progress.loss_sum = 0;
    progress.correct = 0;
    if (precision_->clip_grad_norm() > 0.0f) {
      clip_tally = precision_->clip_tally();
      progress.clip = ClipTally{};
    }
  }
  return progress;
}

EpochStats Trainer::train_epoch(std::int64_t epoch, TrainObserver& observer) {
  cuda_graph();
  memory_stats(device_).reset_peaks();
  // A resumed epoch starts where its checkpoint left off (progress_ is zero otherwise).
  data::Loader loader(data_.train, sampler_.epoch_indices(epoch), local_batch_size(),
                      progress_.images, epoch, options_.loader_threads);
  epoch_batches_ = progress_.batches + loader.batches();
  observer.on_epoch_begin(epoch, epoch_batches_);
  model_->set_training(true);

  // The loss and accuracy sums stay on the device until the epoch ends (or a checkpoint or
  // the progress bar asks), so no step waits for the device. A resumed epoch's sums go back.
  const StepTally start_sums{progress_.loss_sum, static_cast<std::uint64_t>(progress_.correct)};
  // Reset in place after the first epoch: a captured step adds to the tally's address.
  if (tally_.defined()) {
    tally_.copy_from(make_step_tally(Device::cpu(), start_sums));
  } else {
    tally_ = make_step_tally(device_, start_sums);
  }
  tally_in_epoch_ = true;
  if (precision_->clip_grad_norm() > 0.0f) {  // in place too, with a resumed epoch's figures
    precision_->clip_tally().copy_from(make_clip_tally(Device::cpu(), progress_.clip));
  }
  std::int64_t& images = progress_.images;
  std::int64_t& batches = progress_.batches;
  const std::int64_t images_before = images;
  const auto start = std::chrono::steady_clock::now();
  const auto mean_loss = [this] {
    const EpochProgress progress = epoch_progress();
    return progress.images ? progress.loss_sum / static_cast<double>(progress.images) : 0.0;
  };
  // Batches reach the device through pinned, double-buffered staging: the next batch's
  // upload is queued before the step that runs meanwhile (core/data/batch_stager.h).
  stager_.clear();  // a stopped epoch's next batch
  RoundTrips epoch_round_trips;
  RoundTrips step_start = round_trips();
  data::Batch batch;
  bool more = loader.next(batch);
  if (more) stager_.prefetch(batch);
  while (more) {
    const data::Batch staged = stager_.take();
    more = loader.next(batch);
    if (more) stager_.prefetch(batch);
    step(staged);
    images += staged.labels.numel();
    ++batches;
    if (auto warning = overflow_.after_step(steps_)) observer.on_warning(*warning);
    last_step_round_trips_ = round_trips() - step_start;
    epoch_round_trips += last_step_round_trips_;
    if (auto notice = step_graph_ ? step_graph_->take_notice() : std::nullopt) {
      observer.on_warning(*notice);
    }
    observer.on_step(batches, images, seconds_since(start), mean_loss);
    if (step_hook_ && step_hook_()) {
      stopped_ = true;
      return {};
    }
    step_start = round_trips();
    if (step_limit_reached()) break;
  }
  const EpochProgress sums = epoch_progress();
  tally_in_epoch_ = false;
  // Cut short by --steps: the epoch stays in progress, its sums on the host for a checkpoint.
  const bool epoch_done = progress_.images == sampler_.per_rank();
  const double loss_sum = sums.loss_sum;
  const std::int64_t correct = sums.correct;
  EpochStats stats;
  stats.epoch_seconds = seconds_since(start);
  if (auto warning = overflow_.poll(steps_)) observer.on_warning(*warning);
  stats.epoch = epoch + 1;
  stats.step = steps_;
  stats.train_loss = images ? loss_sum / static_cast<double>(images) : 0.0;
  stats.train_acc = images ? static_cast<double>(correct) / static_cast<double>(images) : 0.0;
  stats.images_per_second = stats.epoch_seconds > 0
                                ? static_cast<double>(images - images_before) / stats.epoch_seconds
                                : 0.0;
  if (data_parallel_) {
    // The job's figures over every rank's examples (progress_ keeps this rank's own sums).
    const double all = static_cast<double>(data_parallel_->sum(images));
    stats.train_loss = all > 0 ? data_parallel_->sum(loss_sum) / all : 0.0;
    stats.train_acc = all > 0 ? static_cast<double>(data_parallel_->sum(correct)) / all : 0.0;
    const double visited = static_cast<double>(data_parallel_->sum(images - images_before));
    stats.images_per_second = stats.epoch_seconds > 0 ? visited / stats.epoch_seconds : 0.0;
  }
  // The sums are in stats; the next epoch starts from zero.
  if (epoch_done) progress_ = EpochProgress{};
  stats.test_acc = evaluate(data_.test);
  if (precision_->ema_decay() > 0.0f) {
    stats.ema = true;
    stats.test_acc_ema = evaluate_ema(data_.test);
    last_test_acc_ema_ = stats.test_acc_ema;
  }
  const amp::ScalerSnapshot scaler = precision_->scaler().snapshot();
  stats.loss_scale = scaler.scale;
  stats.skipped_steps = scaler.skipped_steps;
  stats.lr = precision_->optimizer().current_lr();
  stats.peak_memory_bytes = memory_stats(device_).snapshot().total_peak;
  if (precision_->clip_grad_norm() > 0.0f) {
    const ClipTally clip = read_clip_tally(precision_->clip_tally());
    stats.clipping = true;
    stats.grad_norm = clip.finite_steps > 0 ? clip.norm_sum / clip.finite_steps : std::nan("");
    stats.clipped_steps = clip.clipped_steps;
  }
  stats.round_trips = epoch_round_trips;
  if (epoch_done) epochs_done_ = epoch + 1;
  last_test_acc_ = stats.test_acc;
  return stats;
}

void Trainer::step(const data::Batch& batch) {
  // --- CUDA graph (apps/train/step_graph.h): after warm-up, full batches replay one captured step.
  if (step_graph_) {
    // The step keeps no host-side state of its own: the optimizer's step count and lr live on
    // the device, so a replay advances them and a failed capture leaves them as they were.
    const StepWork work = [this](const Tensor& images, const Tensor& labels) {
      device_step(images, labels);
    };
    if (step_graph_->step(batch, work)) {
      // A launch ran the captured collectives: the group's watchdog follows them.
      if (data_parallel_ && step_graph_->captured()) data_parallel_->ddp().follow_replay();
      ++steps_;
      return;
    }
  }
  // --- end CUDA graph
  device_step(batch.images, batch.labels);  // already on the device (the stager's)
  ++steps_;
}

void Trainer::device_step(const Tensor& images, const Tensor& labels) {
  train_step(*model_, *precision_, images, labels, tally_, data_parallel_.get(),
             options_.accumulation_steps, static_cast<float>(options_.label_smoothing),
             normalization_);
}

Tensor Trainer::forward(const Tensor& images) {
  return model_->forward(normalize_batch(images, normalization_, precision_->input_dtype()));
}

double Trainer::evaluate(const data::Dataset& dataset) {
  if (dataset.size() == 0) return 0.0;
  model_->set_training(false);
  const data::Sampler order(dataset.size(), 0, /*shuffle=*/false);
  // In a data-parallel job each rank evaluates its shard and the counts are summed.
  data::Loader loader(
      dataset,
      data_parallel_ ? data_parallel_->evaluation_order(dataset.size()) : order.epoch_indices(0),
      options_.batch_size, 0, 0, options_.loader_threads);
  std::int64_t correct = 0;
  data::Batch batch;
  nn::clear_weight_cast_cache();
  while (loader.next(batch))
    correct += count_correct(forward(to_device(batch.images)), to_device(batch.labels));
  nn::clear_weight_cast_cache();
  model_->set_training(true);
  if (data_parallel_) correct = data_parallel_->sum(correct);
  return static_cast<double>(correct) / static_cast<double>(dataset.size());
}

double Trainer::evaluate_ema(const data::Dataset& dataset) {
  ALLOY_CHECK(precision_->ema_decay() > 0.0f, "evaluate_ema: the run keeps no weight averages");
  double accuracy = 0.0;
  with_weight_averages(*model_, *precision_, [&] { accuracy = evaluate(dataset); });
  return accuracy;
}

std::string Trainer::params_digest() {
  if (data_parallel_ && data_parallel_->zero()) return data_parallel_->zero()->params_digest();
  return alloy::params_digest(precision_->canonical_parameters());
}

std::int64_t Trainer::parameter_count() {
  std::int64_t count = 0;
  for (const nn::Parameter* param : model_->parameters())
    count += param->value.numel();
  return count;
}

void Trainer::join_data_parallel(parallel::ProcessGroup& group,
                                 const parallel::DdpOptions& options) {
  ALLOY_CHECK(!data_parallel_, "join_data_parallel: the trainer has joined already");
  ALLOY_CHECK(!cuda_graph_planned_, "join_data_parallel: training has started");
  check_zero_options(options_);
  ALLOY_CHECK(options.reduce_to_owners == (options_.zero == 1),
              "join_data_parallel: the gradient reduction does not match zero ", options_.zero);
  data_parallel_ = std::make_unique<DataParallel>(group, *model_, *precision_, options);
  precision_->reset_ema();          // from rank 0's weights, which every rank now holds
  overflow_.read_polls_when_due();  // every rank stops at the same step
  // A global batch that does not divide evenly among the ranks, or a rank's share among the
  // micro-batches, fails here.
  micro_batch_size(options_.batch_size, world_size(), options_.accumulation_steps);
  sampler_ = data_parallel_->training_sampler(data_.train.size(),
                                              static_cast<std::uint64_t>(options_.seed));
}

std::int64_t Trainer::local_batch_size() const {
  return data_parallel_ ? data_parallel_->local_batch_size(options_.batch_size)
                        : options_.batch_size;
}

std::vector<std::string> Trainer::gather_params_digests() {
  const std::string digest = params_digest();
  return data_parallel_ ? data_parallel_->gather(digest) : std::vector<std::string>{digest};
}

Tensor Trainer::to_device(const Tensor& host) const {
  if (device_ == host.device()) return host;
  Tensor placed = Tensor::empty(host.shape(), host.dtype(), device_, MemoryCategory::data);
  placed.copy_from(host);
  return placed;
}

}  // namespace alloy::app
