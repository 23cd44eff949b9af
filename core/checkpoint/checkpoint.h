// The state a checkpoint holds: plain host data, so saving and loading never depend on the
// model, optimizer or scaler classes, and a checkpoint written at one opt level or world size
// resumes at another. checkpoint_file.h puts it on disk.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace alloy::checkpoint {

// One tensor's bytes as the host sees them (little-endian), with its name, dtype and shape.
struct NamedTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::vector<unsigned char> data;

  std::int64_t numel() const { return shape_numel(shape); }
};

// A copy of `tensor` (on any device) under `name`.
NamedTensor make_named_tensor(const std::string& name, const Tensor& tensor);

// Copies `saved` into `target` (on any device). Throws alloy::Error when the saved tensor's
// name is not `name` or its dtype or shape differ from the target's.
void restore_tensor(const NamedTensor& saved, const std::string& name, Tensor& target);

// The tensor called `name`, or nullptr.
const NamedTensor* find_tensor(const std::vector<NamedTensor>& tensors, const std::string& name);

// amp::AmpProperties as plain fields (dtypes by name: "f32", "f16", "bf16").
struct AmpFields {
  std::string opt_level = "O0";
  std::string half_dtype = "f16";
  std::string model_dtype = "f32";
  bool cast_policy = false;
  bool keep_batchnorm_fp32 = false;
  bool master_weights = false;
  bool dynamic_loss_scale = false;
  float static_scale = 1.0f;
  float init_scale = 65536.0f;
  std::int64_t scale_window = 2000;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;
};

// amp::ScalerSnapshot's persistent part.
struct ScalerFields {
  float scale = 1.0f;
  std::int32_t clean_steps = 0;
  std::int32_t skipped_steps = 0;
  std::int32_t at_min_streak = 0;
};

// optim::OptimizerConfig and the optimizer's step count (updates applied: steps the loss scaler
// skipped do not count; checkpoints written before that rule counted them); its tensors are in
// optimizer_state.
struct OptimizerFields {
  std::string kind = "sgd";
  float lr = 0.1f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  std::int64_t steps = 0;
};

// One alloy::Generator's state() under a name ("init", "sampler", "dropout", ...).
struct RngState {
  std::string name;
  std::array<std::uint64_t, 4> state{};
};

// The records below live in the state's `extra` map on disk, one key each with its value as
// text (record_keys below name them; checkpoint_records.cpp maps fields to keys and values),
// so older builds carry them along without understanding them. A field is empty where the file
// has no key: written before the key existed, or by a run that has none; the reader picks the
// default.

// `alloy train`'s settings that a resume takes where their flags are not given, and that
// `alloy eval` rebuilds the run with.
struct RunRecord {
  std::optional<std::string> dataset;
  std::optional<std::string> data_dir;
  std::optional<std::int64_t> threads;  // a CPU continuation is exact only with the same count
  std::optional<std::string> lr_schedule;
  std::optional<std::int64_t> warmup_steps;
  std::optional<double> min_lr;
  std::optional<std::int64_t> accumulation_steps;  // at least 1
  std::optional<double> clip_grad_norm;
  std::optional<std::string> recompute;
  std::optional<double> ema_decay;  // below 1
  std::optional<bool> ema_warmup;
  std::optional<bool> allow_tf32;
  std::optional<bool> stochastic_rounding;
  std::optional<double> label_smoothing;  // below 1
  // The data's shape flags (0: the data's own), --normalize and --augment.
  std::optional<int> image_size;
  std::optional<int> channels;
  std::optional<int> num_classes;
  std::optional<int> synthetic_size;
  std::optional<std::string> normalize;
  std::optional<std::string> augment;
  // On a GPU, the cuDNN algorithms the run's convolutions used (core/ops/conv2d_algorithm_db.h
  // lines), so a resumed run continues with the same ones.
  std::optional<std::string> conv_algorithms;
};

// The current epoch's partial sums beside step_in_epoch (one rank's), so a run resumed
// mid-epoch reports the epoch of the run never stopped. Doubles are stored as their bits.
struct EpochRecord {
  std::optional<std::int64_t> images;
  std::optional<std::int64_t> correct;
  std::optional<double> loss_sum;
  // With --clip-grad-norm only (core/ops/clip_grad_norm.h).
  std::optional<double> clip_norm_sum;
  std::optional<std::int64_t> clip_finite_steps;
  std::optional<std::int64_t> clip_clipped_steps;
};

// The loss scaler's state beyond ScalerFields.
struct ScalerRecord {
  std::optional<std::int64_t> overflow_streak;  // overflowing steps in a row
};

// A sequence model's own state (apps/train/lm_trainer.h).
struct GptRecord {
  std::optional<std::string> config;  // the model's shape, as lm_trainer.cpp writes it
  std::optional<std::string> vocabulary;
  // The run's data, evaluation and length, so that a resumed run needs none of their flags.
  std::optional<std::string> data_file;
  std::optional<std::string> val_file;
  std::optional<double> val_fraction;  // below 1
  std::optional<std::int64_t> eval_every;
  std::optional<std::int64_t> eval_batches;  // at least 1
  std::optional<std::int64_t> steps;         // the run's --steps, at least 1
};

// The records' keys in `extra`: the on-disk names, which never change.
namespace record_keys {
inline constexpr char kDataset[] = "dataset";
inline constexpr char kDataDir[] = "data_dir";
inline constexpr char kThreads[] = "threads";
inline constexpr char kLrSchedule[] = "lr_schedule";
inline constexpr char kWarmupSteps[] = "warmup_steps";
inline constexpr char kMinLr[] = "min_lr";
inline constexpr char kAccumulationSteps[] = "accumulation_steps";
inline constexpr char kClipGradNorm[] = "clip_grad_norm";
inline constexpr char kRecompute[] = "recompute";
inline constexpr char kEmaDecay[] = "ema_decay";
inline constexpr char kEmaWarmup[] = "ema_warmup";
inline constexpr char kAllowTf32[] = "allow_tf32";
inline constexpr char kStochasticRounding[] = "stochastic_rounding";
inline constexpr char kLabelSmoothing[] = "label_smoothing";
inline constexpr char kImageSize[] = "image_size";
inline constexpr char kChannels[] = "channels";
inline constexpr char kNumClasses[] = "num_classes";
inline constexpr char kSyntheticSize[] = "synthetic_size";
inline constexpr char kNormalize[] = "normalize";
inline constexpr char kAugment[] = "augment";
inline constexpr char kConvAlgorithms[] = "conv_algorithms";
inline constexpr char kEpochImages[] = "epoch_images";
inline constexpr char kEpochCorrect[] = "epoch_correct";
inline constexpr char kEpochLossSum[] = "epoch_loss_sum_bits";
inline constexpr char kEpochClipNormSum[] = "epoch_clip_norm_sum_bits";
inline constexpr char kEpochClipFiniteSteps[] = "epoch_clip_finite_steps";
inline constexpr char kEpochClipClippedSteps[] = "epoch_clip_clipped_steps";
inline constexpr char kScalerOverflowStreak[] = "scaler_overflow_streak";
inline constexpr char kGptConfig[] = "gpt.config";
inline constexpr char kGptVocabulary[] = "gpt.vocabulary";
inline constexpr char kGptDataFile[] = "gpt.data_file";
inline constexpr char kGptValFile[] = "gpt.val_file";
inline constexpr char kGptValFraction[] = "gpt.val_fraction";
inline constexpr char kGptEvalEvery[] = "gpt.eval_every";
inline constexpr char kGptEvalBatches[] = "gpt.eval_batches";
inline constexpr char kGptSteps[] = "gpt.steps";
}  // namespace record_keys

struct CheckpointState {
  std::string alloy_version;  // of the build that wrote it
  std::string model;          // the model zoo's name, e.g. "lenet"
  std::string model_description;

  AmpFields amp;

  std::int64_t epoch = 0;          // completed epochs
  std::int64_t step = 0;           // global optimizer steps
  std::int64_t step_in_epoch = 0;  // batches done in the current epoch: the sampler position
  std::int64_t world_size = 1;
  std::uint64_t seed = 0;
  std::int64_t batch_size = 0;
  std::vector<RngState> rng_states;

  ScalerFields scaler;
  OptimizerFields optimizer;

  std::vector<NamedTensor> parameters;  // the canonical fp32 weights
  std::vector<NamedTensor> buffers;     // e.g. batch norm running statistics
  std::vector<NamedTensor> optimizer_state;
  std::string params_digest;

  RunRecord run;
  EpochRecord epoch_sums;
  ScalerRecord scaler_record;
  GptRecord gpt;

  // Entries of the file's `extra` map that this build does not know, carried along. A record's
  // key never appears here: serialize_state refuses it.
  std::map<std::string, std::string> extra;
};

// The on-disk `extra` map of `state`: its records under their keys, and the unknown entries.
// Throws when `extra` holds a record's key.
std::map<std::string, std::string> extra_entries(const CheckpointState& state);

// Moves the records' entries out of `state.extra` (as a file has it) into the records; the
// last step of deserialize_state. Throws "corrupt field KEY 'VALUE'" for a value no writer
// writes.
void read_records(CheckpointState& state);

struct TensorSpec {
  std::string name;
  Shape shape;
};

// Throws when the checkpoint at `path` holds another model, or parameters or buffers whose
// names or shapes differ from this run's.
void check_compatible(const std::string& path, const CheckpointState& state,
                      const std::string& model, const std::vector<TensorSpec>& parameters,
                      const std::vector<TensorSpec>& buffers);

// The state as a Boost.Serialization binary archive.
std::string serialize_state(const CheckpointState& state);

// The inverse of serialize_state. A damaged payload throws alloy::Error "corrupt: ..." (never
// another exception, and never an allocation larger than the payload justifies); a record's
// value that does not parse, "corrupt field KEY 'VALUE'".
CheckpointState deserialize_state(std::string_view payload);

}  // namespace alloy::checkpoint
