#include "apps/train/lm_trainer.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>

#include "apps/train/memory_report.h"
#include "apps/train/micro_batches.h"
#include "apps/train/recompute.h"
#include "apps/train/training_state.h"
#include "apps/train/version.h"
#include "apps/train/weight_averages.h"
#include "core/digest.h"
#include "core/models/gpt_pretrained.h"
#include "core/nn/cast_policy.h"
#include "core/nn/dropout.h"
#include "core/ops/attention.h"
#include "core/ops/lr_schedule.h"
#include "core/ops/step_tally.h"
#include "core/random.h"
#include "core/setting_error.h"

namespace alloy::app {

namespace {

namespace ckpt = checkpoint;

// Synthetic corpora: this many tokens of training and validation data, at least a few windows.
constexpr std::int64_t kSyntheticTrainTokens = 1 << 16;
constexpr std::int64_t kSyntheticValTokens = 1 << 13;
// The periodic estimates read windows keyed by steps no training step has: -1, -2, ...
constexpr std::int64_t kFirstEvalKey = -1;

}  // namespace

optim::OptimizerConfig lm_optimizer_config(const TrainConfig& o) {
  optim::OptimizerConfig config;
  config.kind = o.optimizer;
  config.lr = static_cast<float>(o.lr);
  config.momentum = static_cast<float>(o.momentum);
  config.weight_decay = static_cast<float>(o.weight_decay);
  config.beta1 = static_cast<float>(o.text.beta1);
  config.beta2 = static_cast<float>(o.text.beta2);
  config.eps = static_cast<float>(o.text.eps);
  config.decay_matrices_only = true;
  return config;
}

void lm_train_step(models::Gpt& model, amp::MixedPrecision& precision, const Tensor& inputs,
                   const Tensor& targets, Tensor& tally, DataParallel* data_parallel,
                   std::int64_t accumulation_steps, float label_smoothing) {
  nn::clear_weight_cast_cache();
  const std::int64_t rows = inputs.dim(0);
  // Every micro-batch's gradient is divided by the step's tokens: the sum is the gradient of
  // the step's mean loss.
  const std::int64_t step_tokens = rows * inputs.dim(1);
  for_each_micro_batch(
      rows, accumulation_steps, precision.optimizer().step_count(), data_parallel,
      [&](std::int64_t first, std::int64_t count) {
        const Tensor h = model.forward(batch_rows(inputs, first, count));
        model.backward(model.loss_step(h, batch_rows(targets, first, count), precision.loss_scale(),
                                       tally, step_tokens, label_smoothing));
      });
  if (data_parallel) data_parallel->after_backward();  // the mean over every rank's rows
  precision.step();
  model.zero_grad();
  nn::clear_weight_cast_cache();
}

namespace {

// The model's config with the data's vocabulary: a text corpus sets it (a larger --vocab-size
// is allowed, as nanoGPT pads it); token files must fit the configured one.
models::GptConfig resolved_config(const TrainConfig& o, const data::TokenCorpus& corpus) {
  models::GptConfig config = o.text.gpt;
  if (o.dataset == "text") {
    if (!o.is_set("vocab_size")) {
      config.vocab_size = static_cast<int>(corpus.vocab_size);
    } else if (config.vocab_size < corpus.vocab_size) {
      setting_fail("{vocab_size} ", config.vocab_size, " is smaller than the ", corpus.vocab_size,
                   " distinct bytes of ", o.text.data_file);
    }
  }
  return config;
}

std::string config_text(const models::GptConfig& c) {
  return detail::concat(c.n_layer, ' ', c.n_head, ' ', c.n_embd, ' ', c.block_size, ' ',
                        c.vocab_size, ' ', c.dropout, ' ', c.bias ? 1 : 0);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GptMeasurement measure_gpt_steps(const MeasureConfig& config, const amp::AmpProperties& properties,
                                 const std::function<void()>& steady_state) {
  GptMeasurement measurement;
  Generator generator(static_cast<std::uint64_t>(config.seed));
  const auto model = models::make_gpt(config.gpt, generator);
  model->to_device(config.device);
  apply_recompute(*model, config.model, config.recompute);
  for (const nn::Parameter* param : model->parameters())
    measurement.parameter_count += param->value.numel();
  optim::OptimizerConfig optimizer = config.optimizer;
  optimizer.decay_matrices_only = true;
  amp::MixedPrecision precision(properties, *model, optimizer);
  precision.set_clip_grad_norm(config.clip_grad_norm);
  precision.set_ema_decay(config.ema_decay);
  const data::TokenSplit tokens =
      data::random_tokens("mem/batch", config.gpt.block_size + 1, config.gpt.vocab_size,
                          static_cast<std::uint64_t>(config.seed));
  const data::TokenBatch batch =
      data::random_windows(tokens, static_cast<std::uint64_t>(config.seed), 0, 0, 0,
                           config.batch_size, config.gpt.block_size);
  const auto place = [&config](const Tensor& host) {
    Tensor placed = Tensor::empty(host.shape(), host.dtype(), config.device, MemoryCategory::data);
    placed.copy_from(host);
    return placed;
  };
  const Tensor inputs = place(batch.inputs), targets = place(batch.targets);
  Tensor tally = make_step_tally(config.device);
  steady_state();
  auto timed_from = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < config.steps; ++step) {
    if (step == 1) timed_from = std::chrono::steady_clock::now();
    lm_train_step(*model, precision, inputs, targets, tally, nullptr, config.accumulation_steps);
    read_step_tally(tally);  // waits for the step's device work
  }
  measurement.timed_seconds = seconds_since(timed_from);
  return measurement;
}

models::GptConfig gpt_config_of(const ckpt::CheckpointState& state, const std::string& path) {
  const std::optional<std::string>& text = state.gpt.config;
  ALLOY_CHECK(models::is_gpt_model(state.model) && text, "checkpoint ", path, " holds model ",
              state.model, ", not a GPT");
  models::GptConfig c;
  int bias = 0;
  std::istringstream in(*text);
  in >> c.n_layer >> c.n_head >> c.n_embd >> c.block_size >> c.vocab_size >> c.dropout >> bias;
  ALLOY_CHECK(!in.fail(), "checkpoint ", path, ": corrupt GPT shape '", *text, "'");
  c.bias = bias != 0;
  try {
    models::check_gpt_config(c);
  } catch (const Error& error) {
    fail("checkpoint ", path, ": corrupt GPT shape: ", error.what());
  }
  return c;
}

std::string vocabulary_of(const ckpt::CheckpointState& state) {
  return state.gpt.vocabulary.value_or(std::string());
}

data::TokenCorpus load_token_corpus(const TrainConfig& o) {
  const SequenceOptions& s = o.text;
  if (o.dataset == "text") return data::load_text_corpus(s.data_file, s.val_fraction);
  data::TokenCorpus corpus;
  if (o.dataset == "tokens") {
    corpus.train = data::load_token_file(s.data_file);
    if (!s.val_file.empty()) corpus.val = data::load_token_file(s.val_file);
  } else {
    const auto seed = static_cast<std::uint64_t>(o.seed);
    const std::int64_t window = s.gpt.block_size + 1;
    corpus.train = data::random_tokens(
        "synthetic (train)", std::max(kSyntheticTrainTokens, 4 * window), s.gpt.vocab_size, seed);
    corpus.val =
        data::random_tokens("synthetic (validation)", std::max(kSyntheticValTokens, 4 * window),
                            s.gpt.vocab_size, seed + 1);
  }
  return corpus;
}

LmTrainer::LmTrainer(const TrainConfig& options, Device device, data::TokenCorpus corpus)
    : options_(options), device_(device), corpus_(std::move(corpus)) {
  const models::GptConfig config = resolved_config(options_, corpus_);
  options_.text.gpt = config;
  micro_batch_size(options_.batch_size, 1, options_.accumulation_steps);  // a UsageError if uneven
  data::check_split(corpus_.train, config.vocab_size, config.block_size);
  if (!corpus_.val.tokens.empty()) data::check_split(corpus_.val, config.vocab_size, 1);
  Generator generator(static_cast<std::uint64_t>(options_.seed));
  model_ = models::make_gpt(config, generator);
  if (!options_.text.init_from.empty())
    models::load_gpt2_pretrained(*model_, options_.text.init_from);
  model_->to_device(device_);
  apply_recompute(*model_, options_.model, options_.recompute);
  nn::CastPolicy policy;
  policy.enabled = options_.precision.cast_policy;
  policy.half_dtype = options_.precision.half_dtype;
  nn::set_cast_policy(policy);
  precision_ = std::make_unique<amp::MixedPrecision>(options_.precision, *model_,
                                                     lm_optimizer_config(options_));
  precision_->set_clip_grad_norm(static_cast<float>(options_.clip_grad_norm));
  precision_->set_ema_decay(static_cast<float>(options_.ema_decay));
  precision_->set_ema_warmup(options_.ema_warmup);
  if (options_.lr_schedule != "constant" || options_.warmup_steps > 0) {
    LrSchedule schedule;
    schedule.decay = parse_lr_decay(options_.lr_schedule);
    schedule.min_lr = static_cast<float>(options_.min_lr);
    schedule.warmup_steps = options_.warmup_steps;
    schedule.total_steps = options_.steps;
    precision_->optimizer().set_schedule(schedule);
  }
  tally_ = make_step_tally(device_);
  set_attention_kernel(parse_attention_kernel(options_.attention_kernel));
}

const char* LmTrainer::attention_kernel_in_use() {
  const amp::AmpProperties& p = options_.precision;
  // qkv comes out of a linear layer: half when the model is, or when O1 casts its inputs.
  const DType dtype = p.model_dtype != DType::f32 ? p.model_dtype
                      : p.cast_policy             ? p.half_dtype
                                                  : DType::f32;
  const models::GptConfig& c = config();
  AttentionGeometry g;
  g.batch = options_.batch_size / world_size();
  g.time = c.block_size;
  g.heads = c.n_head;
  g.head_dim = c.n_embd / c.n_head;
  return attention_kernel_name(attention_kernel_used(device_, dtype, g, c.dropout > 0.0f));
}

Tensor LmTrainer::to_device(const Tensor& host) const {
  if (device_ == host.device()) return host;
  Tensor placed = Tensor::empty(host.shape(), host.dtype(), device_, MemoryCategory::data);
  placed.copy_from(host);
  return placed;
}

void LmTrainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t world = world_size();
  const std::int64_t rows = options_.batch_size / world;
  const std::int64_t block = config().block_size;
  // This rank's rows of the global batch: the windows of one process's batch, whatever W.
  const data::TokenBatch batch =
      data::random_windows(corpus_.train, static_cast<std::uint64_t>(options_.seed), steps_, 0,
                           rank(), rows, block, world);
  const Tensor inputs = to_device(batch.inputs), targets = to_device(batch.targets);
  // The step keeps no host-side state: the optimizer's step count (and with it the dropout
  // masks) and the learning rate live on the device, so a replay advances them.
  const StepWork work = [this](const Tensor& step_inputs, const Tensor& step_targets) {
    lm_train_step(*model_, *precision_, step_inputs, step_targets, tally_, data_parallel_.get(),
                  options_.accumulation_steps, static_cast<float>(options_.label_smoothing));
  };
  if (cuda_graph() && step_graph_->step(inputs, targets, work)) {
    // A launch ran the captured collectives: the group's watchdog follows them.
    if (data_parallel_ && step_graph_->captured()) data_parallel_->ddp().follow_replay();
  } else {
    work(inputs, targets);
  }
  ++steps_;
  tally_rows_ += rows * block;
  trained_tokens_ += options_.batch_size * block;
  train_seconds_ += seconds_since(start);
}

bool LmTrainer::cuda_graph() {
  if (!cuda_graph_planned_) {
    step_graph_ = make_step_graph(options_, device_, world_size(), data_parallel_ != nullptr,
                                  cuda_graph_reason_);
    cuda_graph_planned_ = true;
  }
  return step_graph_ != nullptr;
}

std::optional<std::string> LmTrainer::take_cuda_graph_notice() {
  return step_graph_ ? step_graph_->take_notice() : std::nullopt;
}

void LmTrainer::run(const StepHook& step_hook, const EvalHook& eval_hook) {
  const std::int64_t every = options_.text.eval_every;
  while (steps_ < options_.steps) {
    step();
    if (every > 0 && (steps_ % every == 0 || steps_ == options_.steps) && eval_hook) {
      const double train_loss = take_train_loss();
      eval_hook(steps_, estimate_val_loss(), train_loss);
    }
    if (step_hook && step_hook()) return;
  }
}

double LmTrainer::mean_loss(const Tensor& tally, std::int64_t rows) const {
  if (rows == 0) return std::numeric_limits<double>::quiet_NaN();
  return read_step_tally(tally).loss_sum / static_cast<double>(rows);
}

double LmTrainer::take_train_loss() {
  const auto start = std::chrono::steady_clock::now();
  double loss = mean_loss(tally_, tally_rows_);
  if (data_parallel_ && tally_rows_ > 0) {  // every rank's rows, equal in number
    loss = data_parallel_->sum(loss) / world_size();
  }
  tally_.copy_from(make_step_tally(Device::cpu()));
  tally_rows_ = 0;
  train_seconds_ += seconds_since(start);  // the wait for the steps' device work
  return loss;
}

double LmTrainer::estimate_val_loss() {
  if (corpus_.val.tokens.size() < static_cast<std::size_t>(config().block_size) + 1) {
    return val_loss();  // too short for a full window: the whole split, in shorter ones
  }
  model_->set_training(false);
  nn::clear_weight_cast_cache();
  Tensor tally = make_step_tally(device_);
  std::int64_t rows = 0;
  for (std::int64_t k = 0; k < options_.text.eval_batches; ++k) {
    const data::TokenBatch batch =
        data::random_windows(corpus_.val, static_cast<std::uint64_t>(options_.seed),
                             kFirstEvalKey - k, 0, 0, options_.batch_size, config().block_size);
    model_->loss(model_->forward(to_device(batch.inputs)), to_device(batch.targets), tally);
    rows += batch.targets.numel();
  }
  nn::clear_weight_cast_cache();
  model_->set_training(true);
  return mean_loss(tally, rows);
}

double LmTrainer::val_loss() {
  if (corpus_.val.tokens.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  model_->set_training(false);
  nn::clear_weight_cast_cache();
  Tensor tally = make_step_tally(device_);
  std::int64_t rows = 0;
  data::TokenBatch batch;
  for (std::int64_t b = 0;
       data::sequential_windows(corpus_.val, options_.batch_size, config().block_size, b, batch);
       ++b) {
    model_->loss(model_->forward(to_device(batch.inputs)), to_device(batch.targets), tally);
    rows += batch.targets.numel();
  }
  nn::clear_weight_cast_cache();
  model_->set_training(true);
  return mean_loss(tally, rows);
}

double LmTrainer::val_loss_ema() {
  double loss = 0.0;
  with_weight_averages(*model_, *precision_, [&] { loss = val_loss(); });
  return loss;
}

double LmTrainer::tokens_per_second() const {
  return train_seconds_ > 0 ? static_cast<double>(trained_tokens_) / train_seconds_ : 0.0;
}

void LmTrainer::join_data_parallel(parallel::ProcessGroup& group,
                                   const parallel::DdpOptions& options) {
  ALLOY_CHECK(!data_parallel_, "join_data_parallel: the trainer has joined already");
  ALLOY_CHECK(!cuda_graph_planned_, "join_data_parallel: training has started");
  data_parallel_ = std::make_unique<DataParallel>(group, *model_, *precision_, options);
  micro_batch_size(options_.batch_size, world_size(), options_.accumulation_steps);
}

int LmTrainer::world_size() const {
  return data_parallel_ ? data_parallel_->world_size() : 1;
}

int LmTrainer::rank() const {
  return data_parallel_ ? data_parallel_->rank() : 0;
}

std::vector<std::string> LmTrainer::gather_params_digests() {
  const std::string digest = params_digest();
  return data_parallel_ ? data_parallel_->gather(digest) : std::vector<std::string>{digest};
}

std::string LmTrainer::params_digest() {
  return alloy::params_digest(precision_->canonical_parameters());
}

std::int64_t LmTrainer::parameter_count() {
  std::int64_t count = 0;
  for (const nn::Parameter* param : model_->parameters())
    count += param->value.numel();
  return count;
}

ckpt::CheckpointState LmTrainer::capture() {
  ckpt::CheckpointState state;
  state.alloy_version = version_string();
  state.model = options_.model;
  state.model_description = model_->describe();
  const amp::AmpProperties& p = options_.precision;
  state.amp.opt_level = amp::opt_level_name(p.level);
  state.amp.half_dtype = dtype_name(p.half_dtype);
  state.amp.model_dtype = dtype_name(p.model_dtype);
  state.amp.cast_policy = p.cast_policy;
  state.amp.keep_batchnorm_fp32 = p.keep_batchnorm_fp32;
  state.amp.master_weights = p.master_weights;
  state.amp.dynamic_loss_scale = p.loss_scale.dynamic;
  state.step = steps_;
  state.seed = static_cast<std::uint64_t>(options_.seed);
  state.batch_size = options_.batch_size;
  const amp::ScalerSnapshot scaler = precision_->scaler().snapshot();
  state.scaler.scale = scaler.scale;
  state.scaler.clean_steps = scaler.clean_steps;
  state.scaler.skipped_steps = scaler.skipped_steps;
  state.scaler.at_min_streak = scaler.at_min_streak;
  optim::Optimizer& optimizer = precision_->optimizer();
  const optim::OptimizerConfig& c = optimizer.config();
  state.optimizer = {c.kind,  c.lr,    c.momentum, c.weight_decay,   c.nesterov,
                     c.beta1, c.beta2, c.eps,      optimizer.steps()};
  for (const optim::StateTensor& tensor : optimizer.state())
    state.optimizer_state.push_back(ckpt::make_named_tensor(tensor.name, *tensor.value));
  for (const optim::StateTensor& tensor : precision_->ema_state())
    state.optimizer_state.push_back(ckpt::make_named_tensor(tensor.name, *tensor.value));
  for (const nn::Parameter* param : precision_->canonical_parameters())
    state.parameters.push_back(ckpt::make_named_tensor(param->name, param->value));
  state.params_digest = params_digest();
  state.gpt.config = config_text(config());
  state.gpt.vocabulary = corpus_.vocabulary;
  // What a resumed run takes where it is given no flag (apps/cli/sequence_flags.h).
  state.run = run_record(options_);
  const SequenceOptions& s = options_.text;
  // Absolute, so that a run resumed or evaluated from another directory finds them.
  if (!s.data_file.empty()) state.gpt.data_file = std::filesystem::absolute(s.data_file).string();
  if (!s.val_file.empty()) state.gpt.val_file = std::filesystem::absolute(s.val_file).string();
  state.gpt.val_fraction = s.val_fraction;
  state.gpt.eval_every = s.eval_every;
  state.gpt.eval_batches = s.eval_batches;
  state.gpt.steps = options_.steps;
  return state;
}

void LmTrainer::restore(const ckpt::CheckpointState& state, const std::string& path,
                        const std::function<void(const std::string&)>& warn) {
  const std::vector<nn::Parameter*> params = precision_->canonical_parameters();
  std::vector<ckpt::TensorSpec> specs;
  for (const nn::Parameter* param : params)
    specs.push_back({param->name, param->value.shape()});
  ckpt::check_compatible(path, state, options_.model, specs, {});
  const std::optional<std::string>& config = state.gpt.config;
  ALLOY_CHECK(config == config_text(this->config()), "checkpoint ", path,
              " holds a GPT of another shape (", config.value_or("none recorded"),
              ") than this run's (", config_text(this->config()), ")");
  ALLOY_CHECK(state.gpt.vocabulary == corpus_.vocabulary, "checkpoint ", path,
              " was trained on another vocabulary than ", corpus_.train.name);
  for (nn::Parameter* param : params) {
    const ckpt::NamedTensor* saved = ckpt::find_tensor(state.parameters, param->name);
    ALLOY_CHECK(saved != nullptr, "checkpoint ", path, " has no parameter ", param->name);
    ckpt::restore_tensor(*saved, param->name, param->value);
  }
  precision_->sync_model_from_masters();
  optim::Optimizer& optimizer = precision_->optimizer();
  if (state.optimizer.kind != optimizer.config().kind) {
    setting_failure("checkpoint ", path, " holds ", state.optimizer.kind,
                    " optimizer state, but this run uses {optimizer} ", optimizer.config().kind);
  }
  for (const optim::StateTensor& tensor : optimizer.state()) {
    const ckpt::NamedTensor* saved = ckpt::find_tensor(state.optimizer_state, tensor.name);
    ALLOY_CHECK(saved != nullptr, "checkpoint ", path, " has no optimizer state ", tensor.name);
    ckpt::restore_tensor(*saved, tensor.name, *tensor.value);
  }
  optimizer.set_steps(state.optimizer.steps);
  restore_weight_averages(*precision_, state, path, warn);
  if (precision_->scaler().dynamic() && state.amp.dynamic_loss_scale) {
    amp::ScalerSnapshot snapshot;
    snapshot.scale = state.scaler.scale;
    snapshot.clean_steps = state.scaler.clean_steps;
    snapshot.skipped_steps = state.scaler.skipped_steps;
    snapshot.at_min_streak = state.scaler.at_min_streak;
    precision_->scaler().restore(snapshot);
  }
  if (state.step < 0 || state.step > options_.steps) {
    setting_failure("checkpoint ", path, " is at step ", state.step, ", beyond this run's {steps} ",
                    options_.steps);
  }
  steps_ = state.step;
}

}  // namespace alloy::app
