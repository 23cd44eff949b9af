#include "apps/training_state.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/digest.h"
#include "core/error.h"
#include "core/random.h"

namespace alloy::app {

namespace {

namespace ckpt = alloy::checkpoint;

// Keys of CheckpointState::extra written by `alloy train`.
constexpr const char* kDataset = "dataset";
constexpr const char* kDataDir = "data_dir";
constexpr const char* kThreads = "threads";
constexpr const char* kEpochImages = "epoch_images";
constexpr const char* kEpochCorrect = "epoch_correct";
constexpr const char* kEpochLossSum = "epoch_loss_sum_bits";  // the double's bits, exact
// The scaler's overflowing steps in a row (--max-consecutive-skips); in `extra`, so the format
// version stays and older files (without it) resume with 0.
constexpr const char* kScalerOverflowStreak = "scaler_overflow_streak";

// Floating tensors are saved as f32 whatever the run's storage (fp16 at O3, for one), so a
// checkpoint's weights are the same canonical fp32 values at every opt level; widening a half
// value is exact.
ckpt::NamedTensor save_tensor(const std::string& name, const Tensor& tensor) {
  if (!is_half(tensor.dtype())) return ckpt::make_named_tensor(name, tensor);
  const std::vector<float> values = tensor.to_floats();
  ckpt::NamedTensor saved{name, DType::f32, tensor.shape(), {}};
  saved.data.resize(values.size() * sizeof(float));
  if (!values.empty()) std::memcpy(saved.data.data(), values.data(), saved.data.size());
  return saved;
}

// Copies `saved` into `target`, rounding f32 to the target's half type where the run stores
// this tensor in half (the masters of O2 stay fp32 and take the values unchanged).
void load_tensor(const ckpt::NamedTensor& saved, Tensor& target, const std::string& path) {
  if (saved.dtype == target.dtype() || !is_half(target.dtype())) {
    try {
      ckpt::restore_tensor(saved, saved.name, target);
    } catch (const Error& error) {
      fail("checkpoint ", path, ": ", error.what());
    }
    return;
  }
  ALLOY_CHECK(saved.dtype == DType::f32 && saved.shape == target.shape(), "checkpoint ", path,
              ": tensor ", saved.name, " is ", dtype_name(saved.dtype), shape_str(saved.shape),
              ", which cannot restore this run's ", dtype_name(target.dtype()),
              shape_str(target.shape()));
  std::vector<float> values(static_cast<std::size_t>(saved.numel()));
  if (!values.empty()) std::memcpy(values.data(), saved.data.data(), saved.data.size());
  target.copy_from(
      Tensor::from_floats(target.shape(), values, target.dtype(), MemoryCategory::workspace));
}

std::vector<ckpt::TensorSpec> specs_of(const std::vector<nn::Parameter*>& params) {
  std::vector<ckpt::TensorSpec> specs;
  for (const nn::Parameter* p : params)
    specs.push_back({p->name, p->value.shape()});
  return specs;
}

std::vector<ckpt::TensorSpec> specs_of(const std::vector<nn::Buffer*>& buffers) {
  std::vector<ckpt::TensorSpec> specs;
  for (const nn::Buffer* b : buffers)
    specs.push_back({b->name, b->value.shape()});
  return specs;
}

ckpt::AmpFields amp_fields(const amp::AmpProperties& p) {
  ckpt::AmpFields f;
  f.opt_level = amp::opt_level_name(p.level);
  f.half_dtype = dtype_name(p.half_dtype);
  f.model_dtype = dtype_name(p.model_dtype);
  f.cast_policy = p.cast_policy;
  f.keep_batchnorm_fp32 = p.keep_batchnorm_fp32;
  f.master_weights = p.master_weights;
  f.dynamic_loss_scale = p.loss_scale.dynamic;
  f.static_scale = p.loss_scale.static_scale;
  f.init_scale = p.loss_scale.init_scale;
  f.scale_window = p.loss_scale.window;
  f.growth_factor = p.loss_scale.growth_factor;
  f.backoff_factor = p.loss_scale.backoff_factor;
  f.min_scale = p.loss_scale.min_scale;
  f.max_scale = p.loss_scale.max_scale;
  return f;
}

amp::AmpProperties amp_properties(const ckpt::AmpFields& f, const std::string& where) {
  amp::AmpProperties p;
  try {
    p.level = amp::parse_opt_level(f.opt_level);
    p.half_dtype = parse_dtype(f.half_dtype);
    p.model_dtype = parse_dtype(f.model_dtype);
  } catch (const Error& error) {
    fail("checkpoint ", where, ": corrupt opt-level properties: ", error.what());
  }
  p.cast_policy = f.cast_policy;
  p.keep_batchnorm_fp32 = f.keep_batchnorm_fp32;
  p.master_weights = f.master_weights;
  p.loss_scale.dynamic = f.dynamic_loss_scale;
  p.loss_scale.static_scale = f.static_scale;
  p.loss_scale.init_scale = f.init_scale;
  p.loss_scale.window = f.scale_window;
  p.loss_scale.growth_factor = f.growth_factor;
  p.loss_scale.backoff_factor = f.backoff_factor;
  p.loss_scale.min_scale = f.min_scale;
  p.loss_scale.max_scale = f.max_scale;
  return p;
}

std::string extra_or(const ckpt::CheckpointState& state, const char* key,
                     const std::string& fallback) {
  const auto it = state.extra.find(key);
  return it == state.extra.end() ? fallback : it->second;
}

// A non-negative integer from `extra` (0 when absent).
std::uint64_t extra_u64(const ckpt::CheckpointState& state, const char* key,
                        const std::string& path) {
  const auto it = state.extra.find(key);
  if (it == state.extra.end()) return 0;
  const std::string& text = it->second;
  std::uint64_t value = 0;
  bool ok = !text.empty() && text.size() <= 20;
  for (const char c : text) {
    if (c < '0' || c > '9') ok = false;
    if (!ok) break;
    const std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) ok = false;
    value = value * 10 + digit;
  }
  ALLOY_CHECK(ok, "checkpoint ", path, ": corrupt field ", key, " '", text, "'");
  return value;
}

std::int64_t extra_i64(const ckpt::CheckpointState& state, const char* key,
                       const std::string& path) {
  const std::uint64_t value = extra_u64(state, key, path);
  ALLOY_CHECK(value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
              "checkpoint ", path, ": field ", key, " is out of range");
  return static_cast<std::int64_t>(value);
}

bool any_given(const TrainOptions& o, std::initializer_list<const char*> flags) {
  for (const char* flag : flags) {
    if (o.was_given(flag)) return true;
  }
  return false;
}

}  // namespace

checkpoint::CheckpointState capture_training_state(Trainer& trainer) {
  const TrainOptions& o = trainer.options();
  amp::MixedPrecision& precision = trainer.precision();
  ckpt::CheckpointState state;
  state.alloy_version = ALLOY_VERSION;
  state.model = o.model;
  state.model_description = trainer.model().describe();
  state.amp = amp_fields(precision.properties());

  const EpochProgress& progress = trainer.epoch_progress();
  state.epoch = trainer.epochs_done();
  state.step = trainer.steps();
  state.step_in_epoch = progress.batches;
  state.world_size = trainer.world_size();  // data-parallel runs save from rank 0
  state.seed = static_cast<std::uint64_t>(o.seed);
  state.batch_size = o.batch_size;
  // The generators a run draws from: the weight initialisation (seeded once, before step 1).
  // The epoch's shuffle and the synthetic data are pure functions of (seed, epoch), so the
  // seed and the epoch restore them; no generator advances during training.
  state.rng_states.push_back({"init", Generator(state.seed).state()});

  const amp::ScalerSnapshot scaler = precision.scaler().snapshot();
  state.scaler.scale = scaler.scale;
  state.scaler.clean_steps = scaler.clean_steps;
  state.scaler.skipped_steps = scaler.skipped_steps;
  state.scaler.at_min_streak = scaler.at_min_streak;
  state.extra[kScalerOverflowStreak] = std::to_string(scaler.overflow_streak);

  optim::Optimizer& optimizer = precision.optimizer();
  const optim::OptimizerConfig& config = optimizer.config();
  state.optimizer.kind = config.kind;
  state.optimizer.lr = config.lr;
  state.optimizer.momentum = config.momentum;
  state.optimizer.weight_decay = config.weight_decay;
  state.optimizer.nesterov = config.nesterov;
  state.optimizer.beta1 = config.beta1;
  state.optimizer.beta2 = config.beta2;
  state.optimizer.eps = config.eps;
  state.optimizer.steps = optimizer.steps();
  for (const optim::StateTensor& tensor : optimizer.state()) {
    state.optimizer_state.push_back(save_tensor(tensor.name, *tensor.value));
  }

  for (const nn::Parameter* p : precision.canonical_parameters()) {
    state.parameters.push_back(save_tensor(p->name, p->value));
  }
  for (const nn::Buffer* b : trainer.model().buffers()) {
    state.buffers.push_back(save_tensor(b->name, b->value));
  }
  state.params_digest = trainer.params_digest();

  state.extra[kDataset] = o.dataset;
  state.extra[kDataDir] = o.data_dir;
  state.extra[kThreads] = std::to_string(o.threads);
  state.extra[kEpochImages] = std::to_string(progress.images);
  state.extra[kEpochCorrect] = std::to_string(progress.correct);
  std::uint64_t bits = 0;
  static_assert(sizeof bits == sizeof progress.loss_sum);
  std::memcpy(&bits, &progress.loss_sum, sizeof bits);
  state.extra[kEpochLossSum] = std::to_string(bits);
  return state;
}

void restore_training_state(Trainer& trainer, const checkpoint::CheckpointState& state,
                            const std::string& path, const WarningSink& warn) {
  const TrainOptions& o = trainer.options();
  amp::MixedPrecision& precision = trainer.precision();
  const std::vector<nn::Parameter*> params = precision.canonical_parameters();
  const std::vector<nn::Buffer*> buffers = trainer.model().buffers();
  ckpt::check_compatible(path, state, o.model, specs_of(params), specs_of(buffers));

  // Weights: into the canonical copies, then rounded into the half model where there is one.
  for (nn::Parameter* p : params)
    load_tensor(*ckpt::find_tensor(state.parameters, p->name), p->value, path);
  precision.sync_model_from_masters();
  for (nn::Buffer* b : buffers)
    load_tensor(*ckpt::find_tensor(state.buffers, b->name), b->value, path);

  optim::Optimizer& optimizer = precision.optimizer();
  ALLOY_CHECK(state.optimizer.kind == optimizer.config().kind, "checkpoint ", path, " holds ",
              state.optimizer.kind, " optimizer state, but this run uses --optimizer ",
              optimizer.config().kind);
  std::vector<std::string> used;
  for (const optim::StateTensor& tensor : optimizer.state()) {
    const ckpt::NamedTensor* saved = ckpt::find_tensor(state.optimizer_state, tensor.name);
    if (saved == nullptr) {
      if (warn) {
        warn("checkpoint " + path + " has no optimizer state " + tensor.name +
             " (saved with other hyper-parameters); it starts from zero");
      }
      continue;
    }
    load_tensor(*saved, *tensor.value, path);
    used.push_back(tensor.name);
  }
  if (used.size() < state.optimizer_state.size() && warn) {
    warn("checkpoint " + path + " holds " +
         std::to_string(state.optimizer_state.size() - used.size()) +
         " optimizer state tensors this run's optimizer does not use; they are dropped");
  }
  optimizer.set_steps(state.optimizer.steps);

  // The loss scale carries over between dynamic scalers; a static scale is the run's own,
  // and a dynamic scaler resumed from a static run starts at its initial scale.
  amp::LossScaler& scaler = precision.scaler();
  if (scaler.dynamic() && state.amp.dynamic_loss_scale) {
    amp::ScalerSnapshot snapshot;
    snapshot.scale = state.scaler.scale;
    snapshot.clean_steps = state.scaler.clean_steps;
    snapshot.skipped_steps = state.scaler.skipped_steps;
    snapshot.at_min_streak = state.scaler.at_min_streak;
    snapshot.overflow_streak = static_cast<std::int32_t>(std::min<std::int64_t>(
        extra_i64(state, kScalerOverflowStreak, path), std::numeric_limits<std::int32_t>::max()));
    scaler.restore(snapshot);
  }

  EpochProgress progress;
  progress.batches = state.step_in_epoch;
  progress.images = extra_i64(state, kEpochImages, path);
  progress.correct = extra_i64(state, kEpochCorrect, path);
  const std::uint64_t bits = extra_u64(state, kEpochLossSum, path);
  std::memcpy(&progress.loss_sum, &bits, sizeof bits);
  // Mid-epoch, the sampler position and the epoch's sums are one rank's: they carry over only to
  // a job of the same world size. Epoch-end checkpoints resume at any world size.
  if (progress.images > 0 && state.world_size != trainer.world_size()) {
    fail("checkpoint ", path, " was saved mid-epoch (step ", state.step_in_epoch,
         " of its epoch) by a job of ", state.world_size, " rank(s) and can resume only with ",
         state.world_size, "; this job has ", trainer.world_size(),
         " (an epoch-end checkpoint resumes at any world size)");
  }
  if (progress.images > 0 && state.batch_size != o.batch_size && warn) {
    warn("checkpoint " + path + " was saved mid-epoch with batch size " +
         std::to_string(state.batch_size) + "; the rest of the epoch runs with " +
         std::to_string(o.batch_size));
  }
  const std::string threads = extra_or(state, kThreads, "");
  if (!threads.empty() && threads != std::to_string(o.threads) && warn) {
    warn("checkpoint " + path + " was saved by a run with " + threads + " threads, this one has " +
         std::to_string(o.threads) + ": the continuation is exact only with the same thread count");
  }
  try {
    trainer.set_position(state.epoch, state.step, progress);
  } catch (const Error& error) {
    fail("checkpoint ", path, ": ", error.what());
  }
}

checkpoint::LoadedCheckpoint load_resume_checkpoint(const std::string& file_or_dir,
                                                    const WarningSink& warn) {
  std::error_code error;
  if (std::filesystem::is_directory(file_or_dir, error)) {
    return ckpt::find_latest_valid(file_or_dir, warn);
  }
  return {file_or_dir, ckpt::read_checkpoint(file_or_dir)};
}

void apply_checkpoint_defaults(const checkpoint::CheckpointState& state, TrainOptions& o) {
  if (!o.was_given("model")) o.model = state.model;
  if (!o.was_given("dataset")) o.dataset = extra_or(state, kDataset, o.dataset);
  if (!o.was_given("data-dir")) o.data_dir = extra_or(state, kDataDir, o.data_dir);
  if (!o.was_given("seed")) o.seed = static_cast<std::int64_t>(state.seed);
  if (!o.was_given("batch-size") && state.batch_size > 0) o.batch_size = state.batch_size;
  if (!o.was_given("optimizer")) o.optimizer = state.optimizer.kind;
  if (!o.was_given("lr")) o.lr = state.optimizer.lr;
  if (!o.was_given("momentum")) o.momentum = state.optimizer.momentum;
  if (!o.was_given("weight-decay")) o.weight_decay = state.optimizer.weight_decay;
  if (!any_given(o,
                 {"opt-level", "half-dtype", "loss-scale", "init-loss-scale", "scale-window",
                  "min-loss-scale", "max-loss-scale", "keep-batchnorm-fp32", "master-weights"})) {
    o.precision = amp_properties(state.amp, o.resume);
  }
}

TrainOptions options_from_checkpoint(const checkpoint::CheckpointState& state) {
  TrainOptions o;
  apply_checkpoint_defaults(state, o);
  return o;
}

std::string stored_params_digest(const checkpoint::CheckpointState& state) {
  std::vector<nn::Parameter> params(state.parameters.size());
  std::vector<nn::Parameter*> pointers;
  for (std::size_t i = 0; i < state.parameters.size(); ++i) {
    const ckpt::NamedTensor& saved = state.parameters[i];
    params[i].name = saved.name;
    params[i].value =
        Tensor::empty(saved.shape, saved.dtype, Device::cpu(), MemoryCategory::workspace);
    ckpt::restore_tensor(saved, saved.name, params[i].value);
    pointers.push_back(&params[i]);
  }
  return params_digest(pointers);
}

}  // namespace alloy::app
