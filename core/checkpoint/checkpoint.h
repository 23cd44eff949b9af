// The state a checkpoint holds: plain host data, so saving and loading never depend on the
// model, optimizer or scaler classes, and a checkpoint written at one opt level or world size
// resumes at another. checkpoint_file.h puts it on disk.
#pragma once

#include <array>
#include <cstdint>
#include <map>
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

  // Additions that older builds carry along without understanding them.
  std::map<std::string, std::string> extra;
};

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
// another exception, and never an allocation larger than the payload justifies).
CheckpointState deserialize_state(std::string_view payload);

}  // namespace alloy::checkpoint
