#include "apps/train/training_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "apps/train/data_parallel.h"
#include "apps/train/recompute.h"
#include "core/checkpoint/sharded_checkpoint.h"
#include "core/digest.h"
#include "core/error.h"
#include "core/half.h"
#include "core/ops/conv2d_algorithm_db.h"
#include "core/ops/lr_schedule.h"
#include "core/ops/step_tally.h"
#include "core/random.h"
#include "core/setting_error.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/cuda/handles.h"
#include "core/cuda/pinned_buffer.h"
#endif

namespace alloy::app {

namespace {

namespace ckpt = alloy::checkpoint;

// `count` floating values of type `dtype` at `bytes` (host memory, any alignment) as fp32;
// widening a half value is exact.
void widen(const unsigned char* bytes, DType dtype, std::size_t count, float* out) {
  if (dtype == DType::f32) {
    if (count > 0) std::memcpy(out, bytes, count * sizeof(float));
    return;
  }
  for (std::size_t i = 0; i < count; ++i) {
    std::uint16_t bits;
    std::memcpy(&bits, bytes + 2 * i, sizeof bits);
    out[i] = dtype == DType::f16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
  }
}

// Floating tensors are saved as f32 whatever the run's storage (fp16 at O3, for one), so a
// checkpoint's weights are the same canonical fp32 values at every opt level; widening a half
// value is exact. `bytes`: a host copy of a tensor's contents.
ckpt::NamedTensor saved_from_bytes(const std::string& name, DType dtype, const Shape& shape,
                                   const unsigned char* bytes) {
  const std::size_t count = static_cast<std::size_t>(shape_numel(shape));
  ckpt::NamedTensor saved{name, is_half(dtype) ? DType::f32 : dtype, shape, {}};
  saved.data.resize(count * dtype_size(saved.dtype));
  if (is_half(dtype)) {
    std::vector<float> values(count);
    widen(bytes, dtype, count, values.data());
    if (count > 0) std::memcpy(saved.data.data(), values.data(), saved.data.size());
  } else if (!saved.data.empty()) {
    std::memcpy(saved.data.data(), bytes, saved.data.size());
  }
  return saved;
}

ckpt::NamedTensor save_tensor(const std::string& name, const Tensor& tensor) {
  if (!is_half(tensor.dtype())) return ckpt::make_named_tensor(name, tensor);
  std::vector<unsigned char> bytes(tensor.nbytes());
  tensor.download_to(bytes.data());
  return saved_from_bytes(name, tensor.dtype(), tensor.shape(), bytes.data());
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

bool any_set(const TrainConfig& o, std::initializer_list<const char*> settings) {
  for (const char* setting : settings) {
    if (o.is_set(setting)) return true;
  }
  return false;
}

// The fields of a checkpoint the host knows without reading the device: everything but the
// tensors, the loss scaler, the optimizer's step count, params_digest and the epoch's sums.
ckpt::CheckpointState host_fields(Trainer& trainer, const EpochProgress& progress) {
  const TrainConfig& o = trainer.options();
  amp::MixedPrecision& precision = trainer.precision();
  ckpt::CheckpointState state;
  state.alloy_version = ALLOY_VERSION;
  state.model = o.model;
  state.model_description = trainer.model().describe();
  state.amp = amp_fields(precision.properties());

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

  const optim::OptimizerConfig& config = precision.optimizer().config();
  state.optimizer.kind = config.kind;
  state.optimizer.lr = config.lr;
  state.optimizer.momentum = config.momentum;
  state.optimizer.weight_decay = config.weight_decay;
  state.optimizer.nesterov = config.nesterov;
  state.optimizer.beta1 = config.beta1;
  state.optimizer.beta2 = config.beta2;
  state.optimizer.eps = config.eps;

  ckpt::RunRecord& run = state.run;
  run = run_record(o);
  run.data_dir = o.data_dir;
  run.image_size = o.image_size;
  run.channels = o.channels;
  run.num_classes = o.num_classes;
  run.synthetic_size = static_cast<int>(o.synthetic_size);
  run.normalize = o.normalize;
  run.augment = o.augment;
  if (trainer.device().is_cuda()) {
    // A resumed run uses them again, so it continues bit-exactly even where the algorithm db is
    // empty or holds others.
    std::string algorithms = cuda::conv_algorithms_in_use();
    if (!algorithms.empty()) run.conv_algorithms = std::move(algorithms);
  }
  state.epoch_sums.images = progress.images;
  return state;
}

void set_epoch_sums(ckpt::CheckpointState& state, std::int64_t correct, double loss_sum) {
  state.epoch_sums.correct = correct;
  state.epoch_sums.loss_sum = loss_sum;
}

// With --clip-grad-norm, the epoch's clip figures so far, so that a run resumed mid-epoch
// reports the epoch's grad_norm and clipped_steps of the run never stopped.
void set_epoch_clip(ckpt::CheckpointState& state, const ClipTally& clip) {
  state.epoch_sums.clip_norm_sum = clip.norm_sum;
  state.epoch_sums.clip_finite_steps = clip.finite_steps;
  state.epoch_sums.clip_clipped_steps = clip.clipped_steps;
}

// Everything but the weights, the optimizer's and the averages' tensors and params_digest.
ckpt::CheckpointState capture_host_and_scalars(Trainer& trainer) {
  const EpochProgress progress = trainer.epoch_progress();
  ckpt::CheckpointState state = host_fields(trainer, progress);
  set_epoch_sums(state, progress.correct, progress.loss_sum);
  if (trainer.options().clip_grad_norm > 0) set_epoch_clip(state, progress.clip);
  amp::MixedPrecision& precision = trainer.precision();

  const amp::ScalerSnapshot scaler = precision.scaler().snapshot();
  state.scaler.scale = scaler.scale;
  state.scaler.clean_steps = scaler.clean_steps;
  state.scaler.skipped_steps = scaler.skipped_steps;
  state.scaler.at_min_streak = scaler.at_min_streak;
  state.scaler_record.overflow_streak = scaler.overflow_streak;
  state.optimizer.steps = precision.optimizer().steps();
  for (const nn::Buffer* b : trainer.model().buffers()) {
    state.buffers.push_back(save_tensor(b->name, b->value));
  }
  return state;
}

}  // namespace

checkpoint::CheckpointState capture_training_state(Trainer& trainer) {
  ckpt::CheckpointState state = capture_host_and_scalars(trainer);
  amp::MixedPrecision& precision = trainer.precision();
  for (const optim::StateTensor& tensor : precision.optimizer().state()) {
    state.optimizer_state.push_back(save_tensor(tensor.name, *tensor.value));
  }
  for (const optim::StateTensor& tensor : precision.ema_state()) {
    state.optimizer_state.push_back(save_tensor(tensor.name, *tensor.value));
  }
  for (const nn::Parameter* p : precision.canonical_parameters()) {
    state.parameters.push_back(save_tensor(p->name, p->value));
  }
  state.params_digest = trainer.params_digest();
  return state;
}

ShardedCapture capture_sharded_state(Trainer& trainer) {
  ZeroShard* zero = trainer.data_parallel() ? trainer.data_parallel()->zero() : nullptr;
  ALLOY_CHECK(zero != nullptr, "a sharded checkpoint needs a sharded (zero 1) run");
  ShardedCapture capture;
  capture.shared = capture_host_and_scalars(trainer);
  capture.shared.params_digest = trainer.params_digest();  // gathered from every rank's shard
  const ShardedState sharded = zero->sharded_state();
  capture.total = sharded.total;
  capture.range = sharded.range;
  for (const auto& [kind, values] : sharded.flat) {
    ckpt::NamedTensor bytes = ckpt::make_named_tensor(kind, values);
    capture.ranges.push_back({kind, bytes.dtype, std::move(bytes.data)});
  }
  for (const nn::Parameter* p : trainer.model().parameters())
    capture.parameters.push_back({p->name, p->value.shape()});
  return capture;
}

#ifdef ALLOY_HAVE_CUDA
struct SnapshotArena::Impl {
  explicit Impl(Device on) : device(on), copied(on.index) {}
  // The pinned memory must outlive the copies into it.
  ~Impl() { cuda::finish_event_quietly(copied.get()); }

  Device device;
  cuda::PinnedBuffer pinned;
  cuda::Event copied;  // recorded on the device's stream after the latest snapshot's copies
};
#else
struct SnapshotArena::Impl {};
#endif

SnapshotArena::SnapshotArena() = default;
SnapshotArena::~SnapshotArena() = default;

struct StateSnapshot::Queued {
  // Where the copy goes in the checkpoint.
  enum class Role {
    parameter,
    buffer,
    optimizer_state,
    scale,
    clean_steps,
    skipped_steps,
    at_min_streak,
    overflow_streak,
    optimizer_steps,
    epoch_sums,
    epoch_clip,
  };
  Role role;
  std::string name;
  DType dtype;
  Shape shape;
  std::size_t offset;  // in the arena
};

StateSnapshot::StateSnapshot() = default;
StateSnapshot::StateSnapshot(checkpoint::CheckpointState state) : state_(std::move(state)) {}
StateSnapshot::~StateSnapshot() = default;
StateSnapshot::StateSnapshot(StateSnapshot&& other) noexcept = default;
StateSnapshot& StateSnapshot::operator=(StateSnapshot&& other) noexcept = default;

StateSnapshot snapshot_training_state(Trainer& trainer, SnapshotArena& arena) {
  const Device device = trainer.device();
  // The host's tensors: a plain copy.
  if (!device.is_cuda()) return StateSnapshot(capture_training_state(trainer));
#ifndef ALLOY_HAVE_CUDA
  static_cast<void>(arena);
  fail("a checkpoint snapshot on ", device.str(), ": this build of Alloy has no CUDA backend");
#else
  StateSnapshot snapshot;
  using Role = StateSnapshot::Queued::Role;
  Tensor tally, clip_tally;
  const EpochProgress progress = trainer.epoch_progress_on_device(tally, clip_tally);
  snapshot.state_ = host_fields(trainer, progress);
  if (!tally.defined()) set_epoch_sums(snapshot.state_, progress.correct, progress.loss_sum);
  if (!clip_tally.defined() && trainer.options().clip_grad_norm > 0) {
    set_epoch_clip(snapshot.state_, progress.clip);
  }

  // Every device tensor of the state, laid out in the arena at 64-byte boundaries.
  std::vector<StateSnapshot::Queued>& queued = snapshot.queued_;
  std::vector<Tensor> sources;
  std::size_t size = 0;
  const auto add = [&](Role role, const std::string& name, const Tensor& tensor) {
    ALLOY_CHECK(tensor.defined() && tensor.device() == device, "checkpoint snapshot: ", name,
                " is ", tensor.defined() ? tensor.str() : std::string("undefined"),
                ", not a tensor on the training device ", device.str());
    queued.push_back({role, name, tensor.dtype(), tensor.shape(), size});
    sources.push_back(tensor);
    size += (tensor.nbytes() + 63) / 64 * 64;
  };
  // The scalars take() reads as host values: their type and size are checked here.
  const auto add_scalar = [&](Role role, const char* name, const Tensor& tensor, DType dtype,
                              std::int64_t elements) {
    ALLOY_CHECK(tensor.defined() && tensor.dtype() == dtype && tensor.numel() == elements,
                "checkpoint snapshot: ", name, " is ",
                tensor.defined() ? tensor.str() : std::string("undefined"), ", not ",
                dtype_name(dtype), "[", elements, "]");
    add(role, name, tensor);
  };

  amp::MixedPrecision& precision = trainer.precision();
  const amp::ScalerState& scaler = precision.scaler().state();
  add_scalar(Role::scale, "the loss scale", scaler.scale, DType::f32, 1);
  add_scalar(Role::clean_steps, "the scaler's clean steps", scaler.clean_steps, DType::i32, 1);
  add_scalar(Role::skipped_steps, "the scaler's skipped steps", scaler.skipped_steps, DType::i32,
             1);
  add_scalar(Role::at_min_streak, "the scaler's streak at the minimum", scaler.at_min_streak,
             DType::i32, 1);
  add_scalar(Role::overflow_streak, "the scaler's overflow streak", scaler.overflow_streak,
             DType::i32, 1);
  optim::Optimizer& optimizer = precision.optimizer();
  add_scalar(Role::optimizer_steps, "the optimizer's step count", optimizer.step_count(),
             DType::i32, 2);
  if (tally.defined()) add_scalar(Role::epoch_sums, "the epoch's tally", tally, DType::i32, 4);
  if (clip_tally.defined()) {
    add_scalar(Role::epoch_clip, "the epoch's clip tally", clip_tally, DType::i32, 4);
  }
  for (const optim::StateTensor& tensor : optimizer.state())
    add(Role::optimizer_state, tensor.name, *tensor.value);
  for (const optim::StateTensor& tensor : precision.ema_state())
    add(Role::optimizer_state, tensor.name, *tensor.value);
  for (const nn::Parameter* p : precision.canonical_parameters())
    add(Role::parameter, p->name, p->value);
  for (const nn::Buffer* b : trainer.model().buffers())
    add(Role::buffer, b->name, b->value);

  // On the device's one stream: after the step just queued, before the next. Later steps
  // change these tensors only after the copies have read them, and the host does not wait.
  const cudaStream_t stream = cuda::stream_of(device);
  if (!arena.impl_ || arena.impl_->device != device) {
    arena.impl_ = std::make_unique<SnapshotArena::Impl>(device);
  }
  SnapshotArena::Impl& memory = *arena.impl_;
  // take() waited for the previous snapshot's copies; only one dropped untaken (a save that
  // failed before its write began) can still be running, and its memory is about to be reused.
  if (!memory.copied.done("checking the previous checkpoint snapshot's copies")) {
    memory.copied.synchronize();
  }
  if (memory.pinned.bytes() < size) memory.pinned = cuda::PinnedBuffer(size);
  auto* base = static_cast<unsigned char*>(memory.pinned.get());
  for (std::size_t i = 0; i < queued.size(); ++i) {
    cuda::download_async(base + queued[i].offset, sources[i].raw(), device, sources[i].nbytes(),
                         stream);
  }
  memory.copied.record(stream);
  snapshot.arena_ = &arena;
  return snapshot;
#endif
}

namespace {

void check_optimizer_kind(const ckpt::CheckpointState& state, const std::string& path,
                          optim::Optimizer& optimizer) {
  if (state.optimizer.kind != optimizer.config().kind) {
    setting_failure("checkpoint ", path, " holds ", state.optimizer.kind,
                    " optimizer state, but this run uses {optimizer} ", optimizer.config().kind);
  }
}

void restore_counters(Trainer& trainer, const ckpt::CheckpointState& state, const std::string& path,
                      const WarningSink& warn);

}  // namespace

std::size_t restore_weight_averages(amp::MixedPrecision& precision,
                                    const checkpoint::CheckpointState& state,
                                    const std::string& path, const WarningSink& warn) {
  // The weight averages travel with the optimizer state, named "ema.<name>".
  const auto saved_averages = static_cast<std::size_t>(
      std::count_if(state.optimizer_state.begin(), state.optimizer_state.end(),
                    [](const ckpt::NamedTensor& t) { return t.name.rfind("ema.", 0) == 0; }));
  std::size_t averages_used = 0;
  if (precision.ema_decay() > 0.0f) {
    if (saved_averages == 0) {
      // Started now, from the weights just restored.
      precision.reset_ema();
      if (warn) {
        warn("checkpoint " + path +
             " holds no weight averages (saved without --ema-decay); they start from its weights");
      }
    } else {
      for (const optim::StateTensor& tensor : precision.ema_state()) {
        const ckpt::NamedTensor* saved = ckpt::find_tensor(state.optimizer_state, tensor.name);
        ALLOY_CHECK(saved != nullptr, "checkpoint ", path, " holds weight averages but not ",
                    tensor.name);
        load_tensor(*saved, *tensor.value, path);
        ++averages_used;
      }
    }
  }
  if (saved_averages > averages_used && warn) {
    warn("checkpoint " + path +
         " holds weight averages (--ema-decay) this run does not keep; "
         "they are dropped");
  }
  return saved_averages;
}

void restore_training_state(Trainer& trainer, const checkpoint::CheckpointState& state,
                            const std::string& path, const WarningSink& warn) {
  const TrainConfig& o = trainer.options();
  amp::MixedPrecision& precision = trainer.precision();
  const std::vector<nn::Parameter*> params = precision.canonical_parameters();
  const std::vector<nn::Buffer*> buffers = trainer.model().buffers();
  ckpt::check_compatible(path, state, o.model, specs_of(params), specs_of(buffers));
  if (state.run.conv_algorithms && trainer.device().is_cuda()) {
    cuda::load_conv_algorithms(*state.run.conv_algorithms, "checkpoint " + path);
  }

  // Weights: into the canonical copies, then rounded into the half model where there is one.
  for (nn::Parameter* p : params)
    load_tensor(*ckpt::find_tensor(state.parameters, p->name), p->value, path);
  precision.sync_model_from_masters();
  for (nn::Buffer* b : buffers)
    load_tensor(*ckpt::find_tensor(state.buffers, b->name), b->value, path);

  optim::Optimizer& optimizer = precision.optimizer();
  check_optimizer_kind(state, path, optimizer);
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
  const std::size_t saved_averages = restore_weight_averages(precision, state, path, warn);
  const std::size_t optimizer_saved = state.optimizer_state.size() - saved_averages;
  if (used.size() < optimizer_saved && warn) {
    warn("checkpoint " + path + " holds " + std::to_string(optimizer_saved - used.size()) +
         " optimizer state tensors this run's optimizer does not use; they are dropped");
  }
  restore_counters(trainer, state, path, warn);
}

namespace {

// Step counts, the loss scaler and the position: what every resume restores the same way.
void restore_counters(Trainer& trainer, const ckpt::CheckpointState& state, const std::string& path,
                      const WarningSink& warn) {
  const TrainConfig& o = trainer.options();
  amp::MixedPrecision& precision = trainer.precision();
  precision.optimizer().set_steps(state.optimizer.steps);

  // The loss scale carries over between dynamic scalers; a static scale is the run's own,
  // and a dynamic scaler resumed from a static run starts at its initial scale.
  amp::LossScaler& scaler = precision.scaler();
  if (scaler.dynamic() && state.amp.dynamic_loss_scale) {
    amp::ScalerSnapshot snapshot;
    snapshot.scale = state.scaler.scale;
    snapshot.clean_steps = state.scaler.clean_steps;
    snapshot.skipped_steps = state.scaler.skipped_steps;
    snapshot.at_min_streak = state.scaler.at_min_streak;
    // Absent from files written before --max-consecutive-skips: no streak.
    snapshot.overflow_streak = static_cast<std::int32_t>(std::min<std::int64_t>(
        state.scaler_record.overflow_streak.value_or(0), std::numeric_limits<std::int32_t>::max()));
    scaler.restore(snapshot);
  }

  EpochProgress progress;
  progress.batches = state.step_in_epoch;
  const ckpt::EpochRecord& sums = state.epoch_sums;
  progress.images = sums.images.value_or(0);
  progress.correct = sums.correct.value_or(0);
  progress.loss_sum = sums.loss_sum.value_or(0.0);
  // Absent (clipping off, or a file from before these keys): the epoch's clip figures start at 0.
  progress.clip.norm_sum = sums.clip_norm_sum.value_or(0.0);
  const std::int64_t finite = sums.clip_finite_steps.value_or(0);
  const std::int64_t clipped = sums.clip_clipped_steps.value_or(0);
  ALLOY_CHECK(finite <= state.step_in_epoch && clipped <= finite &&
                  std::isfinite(progress.clip.norm_sum) && progress.clip.norm_sum >= 0,
              "checkpoint ", path, ": corrupt clip figures (", finite, " finite and ", clipped,
              " clipped steps of ", state.step_in_epoch, ", norm sum ", progress.clip.norm_sum,
              ")");
  progress.clip.finite_steps = static_cast<std::int32_t>(finite);
  progress.clip.clipped_steps = static_cast<std::int32_t>(clipped);
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
  if (const std::optional<std::int64_t> threads = state.run.threads;
      threads && *threads != o.threads && warn) {
    warn("checkpoint " + path + " was saved by a run with " + std::to_string(*threads) +
         " threads, this one has " + std::to_string(o.threads) +
         ": the continuation is exact only with the same thread count");
  }
  try {
    trainer.set_position(state.epoch, state.step, progress);
  } catch (const Error& error) {
    fail("checkpoint ", path, ": ", error.what());
  }
}

}  // namespace

void restore_sharded_training_state(Trainer& trainer, const checkpoint::LoadedCheckpoint& loaded,
                                    const WarningSink& warn) {
  ZeroShard* zero = trainer.data_parallel() ? trainer.data_parallel()->zero() : nullptr;
  ALLOY_CHECK(zero != nullptr, "a sharded resume needs a sharded (zero 1) run");
  const ckpt::CheckpointState& state = loaded.state;
  const std::string& path = loaded.path;
  const TrainConfig& o = trainer.options();
  // The canonical weights of a sharded run live in the shards: the model's parameters give
  // their names and shapes.
  std::vector<ckpt::TensorSpec> params;
  for (const nn::Parameter* p : trainer.model().parameters())
    params.push_back({p->name, p->value.shape()});
  const std::vector<nn::Buffer*> buffers = trainer.model().buffers();
  const std::vector<ckpt::FlatParameter> table = ckpt::flat_layout(params);
  if (loaded.manifest) {
    ckpt::check_compatible(path, state, o.model, {}, specs_of(buffers));
    const std::vector<ckpt::FlatParameter>& saved = loaded.manifest->parameters;
    for (std::size_t i = 0; i < std::max(saved.size(), table.size()); ++i) {
      ALLOY_CHECK(i < saved.size() && i < table.size() && saved[i].name == table[i].name &&
                      saved[i].shape == table[i].shape,
                  "checkpoint ", path, ": its parameter ",
                  i < saved.size() ? saved[i].name + shape_str(saved[i].shape) : "(none)",
                  " is not this run's ",
                  i < table.size() ? table[i].name + shape_str(table[i].shape) : "(none)",
                  " (parameter ", i, " of ", o.model, ")");
    }
  } else {
    ckpt::check_compatible(path, state, o.model, params, specs_of(buffers));
  }
  if (state.run.conv_algorithms && trainer.device().is_cuda()) {
    cuda::load_conv_algorithms(*state.run.conv_algorithms, "checkpoint " + path);
  }
  for (nn::Buffer* b : buffers)
    load_tensor(*ckpt::find_tensor(state.buffers, b->name), b->value, path);
  check_optimizer_kind(state, path, trainer.precision().optimizer());

  // This rank's range of every kind the run keeps, from the shards that hold it or from the
  // full tensors of a plain checkpoint; an optimizer kind the checkpoint lacks starts at zero.
  ShardedState mine = zero->sharded_state();
  const ShardRange range = mine.range;
  for (auto& [kind, values] : mine.flat) {
    DType dtype = DType::f32;
    std::optional<std::vector<unsigned char>> bytes;
    if (loaded.manifest) {
      for (const ckpt::FlatKind& saved : loaded.manifest->kinds) {
        if (saved.name != kind) continue;
        dtype = saved.dtype;
        bytes = ckpt::read_flat_range(*loaded.manifest, ckpt::step_dir_of(path), kind, range.begin,
                                      range.end);
      }
    } else {
      const bool present = std::all_of(table.begin(), table.end(), [&](const auto& p) {
        return kind == ckpt::kParamKind ||
               ckpt::find_tensor(state.optimizer_state, p.name + "." + kind) != nullptr;
      });
      if (present) {
        bytes = ckpt::flat_range_of_state(state, table, kind, range.begin, range.end);
        if (!state.parameters.empty()) dtype = state.parameters.front().dtype;
        if (kind != ckpt::kParamKind) dtype = DType::f32;
      }
    }
    if (!bytes) {
      ALLOY_CHECK(kind != ckpt::kParamKind, "checkpoint ", path, " holds no weights");
      if (warn) {
        warn("checkpoint " + path + " has no optimizer state " + kind +
             " (saved with other hyper-parameters); it starts from zero");
      }
      continue;
    }
    Tensor host = Tensor::empty({range.size()}, dtype, Device::cpu(), MemoryCategory::workspace);
    ALLOY_CHECK(bytes->size() == host.nbytes(), "checkpoint ", path, ": ", kind, " holds ",
                bytes->size(), " bytes for ", range.size(), " elements of ", dtype_name(dtype));
    if (!bytes->empty()) std::memcpy(host.raw(), bytes->data(), bytes->size());
    values = host;
  }
  zero->load_sharded_state(mine);
  restore_counters(trainer, state, path, warn);
}

checkpoint::LoadedCheckpoint load_resume_checkpoint(const std::string& file_or_dir,
                                                    const WarningSink& warn, bool gather) {
  std::error_code error;
  if (std::filesystem::is_directory(file_or_dir, error) &&
      !ckpt::is_sharded_checkpoint(file_or_dir)) {
    return ckpt::find_latest_valid(file_or_dir, warn, gather);
  }
  return ckpt::open_checkpoint(file_or_dir, gather);
}

checkpoint::RunRecord run_record(const TrainConfig& o) {
  ckpt::RunRecord run;
  run.dataset = o.dataset;
  run.threads = o.threads;
  run.lr_schedule = o.lr_schedule;
  run.warmup_steps = o.warmup_steps;
  run.min_lr = o.min_lr;
  run.accumulation_steps = o.accumulation_steps;
  run.clip_grad_norm = o.clip_grad_norm;
  run.recompute = o.recompute;
  run.allow_tf32 = o.allow_tf32;
  run.stochastic_rounding = o.stochastic_rounding;
  run.ema_decay = o.ema_decay;
  run.ema_warmup = o.ema_warmup;
  run.label_smoothing = o.label_smoothing;
  return run;
}

void apply_checkpoint_defaults(const checkpoint::CheckpointState& state, TrainConfig& o) {
  // A field the file lacks (written before its key existed, or by a GPT run) leaves the run's own
  // value, or takes the one older runs were trained with.
  const ckpt::RunRecord& run = state.run;
  const auto take = [&](const char* setting, const auto& saved, auto& value) {
    if (!o.is_set(setting) && saved) value = *saved;
  };
  if (!o.is_set("model")) o.model = state.model;
  take("dataset", run.dataset, o.dataset);
  take("data_dir", run.data_dir, o.data_dir);
  take("image_size", run.image_size, o.image_size);
  take("channels", run.channels, o.channels);
  take("num_classes", run.num_classes, o.num_classes);
  take("synthetic_size", run.synthetic_size, o.synthetic_size);
  take("normalize", run.normalize, o.normalize);
  take("augment", run.augment, o.augment);
  if (!o.is_set("seed")) o.seed = static_cast<std::int64_t>(state.seed);
  if (!o.is_set("batch_size") && state.batch_size > 0) o.batch_size = state.batch_size;
  if (!o.is_set("accumulation_steps")) o.accumulation_steps = run.accumulation_steps.value_or(1);
  if (!o.is_set("optimizer")) o.optimizer = state.optimizer.kind;
  if (!o.is_set("lr")) o.lr = state.optimizer.lr;
  if (!o.is_set("momentum")) o.momentum = state.optimizer.momentum;
  if (!o.is_set("weight_decay")) o.weight_decay = state.optimizer.weight_decay;
  if (!o.is_set("lr_schedule")) {
    o.lr_schedule = run.lr_schedule.value_or("constant");
    ALLOY_CHECK(lr_decay_named(o.lr_schedule), "checkpoint ", o.resume, ": corrupt field ",
                ckpt::record_keys::kLrSchedule, " '", o.lr_schedule, "'");
  }
  if (!o.is_set("warmup_steps")) o.warmup_steps = run.warmup_steps.value_or(0);
  if (!o.is_set("min_lr")) o.min_lr = run.min_lr.value_or(0.0);
  if (!o.is_set("clip_grad_norm")) o.clip_grad_norm = run.clip_grad_norm.value_or(0.0);
  if (!o.is_set("label_smoothing")) o.label_smoothing = run.label_smoothing.value_or(0.0);
  if (!o.is_set("ema_decay")) o.ema_decay = run.ema_decay.value_or(0.0);
  if (!o.is_set("ema_warmup")) o.ema_warmup = run.ema_warmup.value_or(false);
  if (!o.is_set("allow_tf32")) o.allow_tf32 = run.allow_tf32.value_or(false);
  if (!o.is_set("stochastic_rounding")) {
    o.stochastic_rounding = run.stochastic_rounding.value_or(false);
  }
  if (!o.is_set("recompute")) {
    o.recompute = run.recompute.value_or("none");
    const auto& choices = recompute_choices();
    ALLOY_CHECK(std::find(choices.begin(), choices.end(), o.recompute) != choices.end(),
                "checkpoint ", o.resume, ": corrupt field ", ckpt::record_keys::kRecompute, " '",
                o.recompute, "'");
  }
  if (!any_set(o, {"opt_level", "half_dtype", "loss_scale", "init_loss_scale", "scale_window",
                   "min_loss_scale", "max_loss_scale", "keep_batchnorm_fp32", "master_weights"})) {
    o.precision = amp_properties(state.amp, o.resume);
  }
}

ckpt::CheckpointState with_weight_averages(const ckpt::CheckpointState& state,
                                           const std::string& path) {
  if (std::none_of(state.optimizer_state.begin(), state.optimizer_state.end(),
                   [](const ckpt::NamedTensor& t) { return t.name.rfind("ema.", 0) == 0; })) {
    setting_failure("checkpoint ", path,
                    " holds no weight averages (it was trained without {ema_decay})");
  }
  ckpt::CheckpointState averaged = state;
  const auto replace = [&](std::vector<ckpt::NamedTensor>& tensors) {
    for (ckpt::NamedTensor& tensor : tensors) {
      const ckpt::NamedTensor* average =
          ckpt::find_tensor(state.optimizer_state, "ema." + tensor.name);
      ALLOY_CHECK(average != nullptr, "checkpoint ", path, ": corrupt: no weight average of ",
                  tensor.name);
      ALLOY_CHECK(average->dtype == DType::f32 && average->shape == tensor.shape, "checkpoint ",
                  path, ": corrupt: the weight average of ", tensor.name, " is ",
                  dtype_name(average->dtype), shape_str(average->shape));
      const std::string name = tensor.name;
      tensor = *average;
      tensor.name = name;
    }
  };
  replace(averaged.parameters);
  replace(averaged.buffers);
  averaged.params_digest = stored_params_digest(averaged);
  return averaged;
}

TrainConfig options_from_checkpoint(const checkpoint::CheckpointState& state) {
  TrainConfig o;
  apply_checkpoint_defaults(state, o);
  return o;
}

checkpoint::CheckpointState StateSnapshot::take() {
#ifdef ALLOY_HAVE_CUDA
  if (arena_ != nullptr) {
    using Role = Queued::Role;
    SnapshotArena::Impl& memory = *arena_->impl_;
    arena_ = nullptr;
    // Usually the checkpoint writer's thread, which has made no device current: a runtime call
    // there would bind (and create) cuda:0's context, in a process training on another device.
    // The thread serves this device alone, so it stays selected (no guard switching back to 0).
    ALLOY_CUDA_CHECK(cudaSetDevice(memory.device.index), "selecting ", memory.device.str(),
                     " for a checkpoint snapshot's host copy");
    memory.copied.synchronize();  // the snapshot's one host wait, on this thread
    const auto* base = static_cast<const unsigned char*>(memory.pinned.get());
    const auto i32 = [](const unsigned char* bytes) {
      std::int32_t value;
      std::memcpy(&value, bytes, sizeof value);
      return value;
    };
    for (const Queued& q : queued_) {
      const unsigned char* bytes = base + q.offset;
      switch (q.role) {
        case Role::parameter:
          state_.parameters.push_back(saved_from_bytes(q.name, q.dtype, q.shape, bytes));
          break;
        case Role::buffer:
          state_.buffers.push_back(saved_from_bytes(q.name, q.dtype, q.shape, bytes));
          break;
        case Role::optimizer_state:
          state_.optimizer_state.push_back(saved_from_bytes(q.name, q.dtype, q.shape, bytes));
          break;
        case Role::scale:
          std::memcpy(&state_.scaler.scale, bytes, sizeof state_.scaler.scale);
          break;
        case Role::clean_steps:
          state_.scaler.clean_steps = i32(bytes);
          break;
        case Role::skipped_steps:
          state_.scaler.skipped_steps = i32(bytes);
          break;
        case Role::at_min_streak:
          state_.scaler.at_min_streak = i32(bytes);
          break;
        case Role::overflow_streak:
          state_.scaler_record.overflow_streak = i32(bytes);
          break;
        case Role::optimizer_steps:
          state_.optimizer.steps = i32(bytes);
          break;
        case Role::epoch_sums: {
          StepTally tally;
          std::memcpy(&tally, bytes, sizeof tally);
          set_epoch_sums(state_, static_cast<std::int64_t>(tally.correct), tally.loss_sum);
          break;
        }
        case Role::epoch_clip: {
          ClipTally clip;
          std::memcpy(&clip, bytes, sizeof clip);
          set_epoch_clip(state_, clip);
          break;
        }
      }
    }
    queued_.clear();
    // The canonical weights are all in state_.parameters now, as fp32.
    state_.params_digest = stored_params_digest(state_);
  }
#endif
  return std::move(state_);
}

std::string stored_params_digest(const checkpoint::CheckpointState& state) {
  std::vector<std::vector<float>> values;
  values.reserve(state.parameters.size());
  std::vector<HostWeights> weights;
  for (const ckpt::NamedTensor& saved : state.parameters) {
    ALLOY_CHECK(saved.dtype == DType::f32 || is_half(saved.dtype), "checkpoint parameter ",
                saved.name, " is ", dtype_name(saved.dtype), ", not floating-point");
    const std::int64_t count = saved.numel();
    ALLOY_CHECK(count >= 0 &&
                    saved.data.size() == static_cast<std::size_t>(count) * dtype_size(saved.dtype),
                "checkpoint parameter ", saved.name, " holds ", saved.data.size(),
                " bytes, not the ", count, " ", dtype_name(saved.dtype), " values of its shape ",
                shape_str(saved.shape));
    values.emplace_back(static_cast<std::size_t>(count));
    widen(saved.data.data(), saved.dtype, values.back().size(), values.back().data());
    weights.push_back({&saved.name, &saved.shape, values.back().data()});
  }
  return params_digest(weights);
}

}  // namespace alloy::app
