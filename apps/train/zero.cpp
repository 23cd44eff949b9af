#include "apps/train/zero.h"

#include <algorithm>
#include <map>

#include "amp/ops/master_copy.h"
#include "amp/ops/unscale.h"
#include "core/digest.h"
#include "core/error.h"
#include "core/models/gpt.h"
#include "core/ops/elementwise.h"
#include "core/optim/optimizer.h"
#include "core/setting_error.h"

namespace alloy::app {

namespace {

// Where each parameter starts in the model's buffer: aligned for any dtype and vector access.
constexpr std::size_t kAlignment = 16;

Shape piece_shape(const Shape& parameter, std::int64_t count) {
  // The optimizer decays by a parameter's dimensions (decay_matrices_only): a piece of a matrix
  // stays two-dimensional.
  return parameter.size() >= 2 ? Shape{1, count} : Shape{count};
}

// `source` (any device and floating dtype) into `target` (same element count).
void copy_converted(Tensor target, const Tensor& source) {
  Tensor placed = source.reshape(target.shape());
  if (placed.device() != target.device()) {
    Tensor uploaded =
        Tensor::empty(placed.shape(), placed.dtype(), target.device(), MemoryCategory::workspace);
    uploaded.copy_from(placed);
    placed = uploaded;
  }
  target.copy_from(placed.dtype() == target.dtype()
                       ? placed
                       : cast(placed, target.dtype(), MemoryCategory::workspace));
}

}  // namespace

void check_zero_options(const TrainConfig& options) {
  if (options.zero != 0 && options.zero != 1) {
    setting_fail("{zero} must be 0 (plain data parallelism) or 1 (sharded optimizer state), got ",
                 options.zero);
  }
  if (options.zero == 0) return;
  const auto refuse = [](const char* what) {
    setting_fail("{zero} 1 with ", what, " is not supported yet");
  };
  if (options.ema_decay > 0) refuse("{ema_decay} (the weight averages are not sharded)");
  if (options.clip_grad_norm > 0) refuse("{clip_grad_norm} (the norm is not summed over shards)");
  if (options.stochastic_rounding) refuse("{stochastic_rounding}");
  if (options.cuda_graph == "on") refuse("{cuda_graph} on (the sharded step runs eagerly)");
  if (models::is_gpt_model(options.model)) refuse("a language model ({model} gpt...)");
}

ZeroShard::ZeroShard(parallel::ProcessGroup& group, nn::Module& model,
                     amp::MixedPrecision& precision)
    : group_(group), precision_(precision), model_params_(model.parameters()) {
  const std::vector<nn::Parameter*> canonical = precision.canonical_parameters();
  ALLOY_CHECK(!model_params_.empty() && canonical.size() == model_params_.size(),
              "zero: the amp layer has ", canonical.size(), " canonical weights for ",
              model_params_.size(), " model parameters");
  device_ = model_params_.front()->value.device();
  std::vector<std::int64_t> sizes;
  for (const nn::Parameter* param : canonical) {
    names_.push_back(param->name);
    shapes_.push_back(param->value.shape());
    dtypes_.push_back(param->value.dtype());
    sizes.push_back(param->value.numel());
  }
  starts_ = parallel::flat_offsets(sizes);
  total_ = starts_.back();
  range_ = parallel::shard_range(total_, group.size(), group.rank());
  ALLOY_CHECK(range_.size() > 0, "zero: rank ", group.rank(), " of ", group.size(),
              " owns none of the model's ", total_, " parameter elements; use fewer ranks");

  // The model's parameters move into one buffer, in flat order.
  std::vector<std::size_t> base;
  std::size_t bytes = 0;
  for (const nn::Parameter* param : model_params_) {
    bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    base.push_back(bytes);
    bytes += param->value.nbytes();
  }
  model_storage_ = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::u8, device_,
                                 MemoryCategory::parameters);
  for (std::size_t i = 0; i < model_params_.size(); ++i) {
    nn::Parameter& param = *model_params_[i];
    Tensor placed = model_storage_.view(base[i], param.value.shape(), param.value.dtype());
    placed.copy_from(param.value);
    param.value = placed;
  }
  // The byte where flat element k lives; `bytes` past the end.
  const auto position = [&](std::int64_t k) {
    for (std::size_t i = 0; i < model_params_.size(); ++i) {
      if (k >= starts_[i] && k < starts_[i + 1]) {
        return static_cast<std::int64_t>(base[i]) +
               (k - starts_[i]) *
                   static_cast<std::int64_t>(dtype_size(model_params_[i]->value.dtype()));
      }
    }
    return static_cast<std::int64_t>(bytes);
  };
  for (int rank = 0; rank < group.size(); ++rank) {
    const parallel::ShardRange theirs = parallel::shard_range(total_, group.size(), rank);
    gather_counts_.push_back(theirs.size() > 0 ? position(theirs.end) - position(theirs.begin) : 0);
  }

  // The shard's pieces of each parameter.
  for (std::size_t i = 0; i < model_params_.size(); ++i) {
    const std::int64_t first = std::max(starts_[i], range_.begin) - starts_[i];
    const std::int64_t last = std::min(starts_[i + 1], range_.end) - starts_[i];
    if (first >= last) continue;
    Piece piece;
    piece.param = i;
    piece.first = first;
    piece.count = last - first;
    piece.master = canonical[i] != model_params_[i];
    if (piece.master) {
      piece.master_offset = master_count_;
      master_count_ += piece.count;
    }
    piece.shard = std::make_unique<nn::Parameter>();
    piece.shard->name = canonical[i]->name;
    piece.shard->is_norm = canonical[i]->is_norm;
    pieces_.push_back(std::move(piece));
  }
  if (master_count_ > 0) {
    masters_ =
        Tensor::empty({master_count_}, DType::f32, device_, MemoryCategory::master_parameters);
  }
  std::vector<nn::Parameter*> shard_params;
  std::vector<Tensor*> copies;
  for (Piece& piece : pieces_) {
    const Shape shape = piece_shape(shapes_[piece.param], piece.count);
    if (piece.master) {
      piece.shard->value =
          masters_.view(static_cast<std::size_t>(piece.master_offset) * 4, shape, DType::f32);
      piece.shard->value.copy_from(canonical[piece.param]->value.view(
          static_cast<std::size_t>(piece.first) * 4, shape, DType::f32));
      piece.model_copy = model_piece(piece, model_params_[piece.param]->value);
    } else {
      piece.shard->value = model_piece(piece, model_params_[piece.param]->value);
    }
    shard_params.push_back(piece.shard.get());
  }
  for (Piece& piece : pieces_)
    copies.push_back(piece.master ? &piece.model_copy : nullptr);
  const amp::LossScaleConfig& scale = precision.properties().loss_scale;
  bool masters = false;
  for (std::size_t i = 0; i < canonical.size(); ++i)
    masters = masters || canonical[i] != model_params_[i];
  needs_unscale_ = masters || scale.dynamic || scale.static_scale != 1.0f;
  nothing_ = Tensor::empty({0}, DType::f32, device_, MemoryCategory::gradients);

  optim::Optimizer& whole = precision.optimizer();
  std::unique_ptr<optim::Optimizer> optimizer = optim::make_optimizer(whole.config(), shard_params);
  optimizer->set_schedule(whole.schedule());
  optimizer->set_steps(whole.steps());
  if (master_count_ > 0) optimizer->write_copies_to(std::move(copies));
  precision.hand_over_step(std::move(optimizer), [this] { step(); });
}

Tensor ZeroShard::model_piece(const Piece& piece, const Tensor& tensor) const {
  return tensor.view(static_cast<std::size_t>(piece.first) * dtype_size(tensor.dtype()),
                     piece_shape(shapes_[piece.param], piece.count), tensor.dtype());
}

void ZeroShard::step() {
  amp::LossScaler& scaler = precision_.scaler();
  amp::ScalerState& state = scaler.state();
  // Shard gradients exist only from the unscale to the update, as the amp layer's master
  // gradients do.
  Tensor grads;
  if (master_count_ > 0) {
    grads = Tensor::empty({master_count_}, DType::f32, device_, MemoryCategory::gradients);
  }
  // One entry per model parameter, empty where the shard has none of it, so that
  // first_overflow names the parameter as the amp layer's pass would.
  std::vector<Tensor> inputs(model_params_.size(), nothing_);
  std::vector<Tensor> outputs = inputs;
  for (Piece& piece : pieces_) {
    const Tensor& grad = model_params_[piece.param]->grad;
    if (!grad.defined()) {
      piece.shard->grad = Tensor();  // took no part in the loss: the optimizer skips it
      continue;
    }
    inputs[piece.param] = model_piece(piece, grad);
    outputs[piece.param] = piece.master
                               ? grads.view(static_cast<std::size_t>(piece.master_offset) * 4,
                                            piece.shard->value.shape(), DType::f32)
                               : inputs[piece.param];
    piece.shard->grad = outputs[piece.param];
  }
  if (needs_unscale_) {
    std::vector<const Tensor*> in;
    std::vector<Tensor*> out;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      in.push_back(&inputs[i]);
      out.push_back(&outputs[i]);
    }
    amp::unscale_and_check(in, out, state.scale, state.found_inf, state.first_overflow);
  }
  // Every rank skips, and moves its scale, on the verdict of all the shards.
  const bool dynamic = scaler.dynamic();
  if (dynamic) {
    group_.allreduce_async(state.found_inf, parallel::ReduceOp::max, nullptr);
    amp::update_scale(state, scaler.config());
  }
  precision_.optimizer().step(1.0f, dynamic ? state.found_inf : Tensor(), Tensor());
  for (Piece& piece : pieces_)
    piece.shard->grad = Tensor();
  gather_model();
}

void ZeroShard::gather_model() {
  group_.allgather_async(model_storage_, gather_counts_, nullptr);
}

std::string ZeroShard::params_digest() {
  Tensor full = Tensor::empty({total_}, DType::f32, device_, MemoryCategory::workspace);
  for (const Piece& piece : pieces_) {
    copy_converted(full.view(static_cast<std::size_t>(starts_[piece.param] + piece.first) * 4,
                             {piece.count}, DType::f32),
                   piece.shard->value);
  }
  std::vector<std::int64_t> counts;
  for (int rank = 0; rank < group_.size(); ++rank)
    counts.push_back(parallel::shard_range(total_, group_.size(), rank).size());
  group_.allgather(full, counts);
  std::vector<nn::Parameter> params(names_.size());
  std::vector<nn::Parameter*> pointers;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    params[i].name = names_[i];
    params[i].value = full.view(static_cast<std::size_t>(starts_[i]) * 4, shapes_[i], DType::f32);
    pointers.push_back(&params[i]);
  }
  return alloy::params_digest(pointers);
}

namespace {

// The optimizer's state tensors of each piece, by kind ("exp_avg", ...), kinds in the order the
// optimizer lists them.
std::vector<std::pair<std::string, std::vector<Tensor*>>> state_by_kind(
    optim::Optimizer& optimizer, std::size_t pieces, const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, std::vector<Tensor*>>> kinds;
  std::size_t piece = 0;
  for (const optim::StateTensor& state : optimizer.state()) {
    // The optimizer lists each parameter's kinds together, parameters in order.
    while (piece < pieces && state.name.rfind(names[piece] + ".", 0) != 0)
      ++piece;
    ALLOY_CHECK(piece < pieces, "zero: optimizer state ", state.name, " belongs to no piece");
    const std::string kind = state.name.substr(names[piece].size() + 1);
    auto found = std::find_if(kinds.begin(), kinds.end(),
                              [&](const auto& entry) { return entry.first == kind; });
    if (found == kinds.end()) {
      kinds.push_back({kind, std::vector<Tensor*>(pieces, nullptr)});
      found = kinds.end() - 1;
    }
    found->second[piece] = state.value;
  }
  return kinds;
}

}  // namespace

ShardedState ZeroShard::sharded_state() {
  ShardedState state;
  state.total = total_;
  state.range = range_;
  const bool all_half = std::all_of(dtypes_.begin(), dtypes_.end(), [&](DType dtype) {
    return is_half(dtype) && dtype == dtypes_.front();
  });
  const DType param_dtype = all_half ? dtypes_.front() : DType::f32;
  const auto at = [&](const Tensor& flat, const Piece& piece) {
    return flat.view(static_cast<std::size_t>(starts_[piece.param] + piece.first - range_.begin) *
                         dtype_size(flat.dtype()),
                     {piece.count}, flat.dtype());
  };
  Tensor params = Tensor::empty({range_.size()}, param_dtype, device_, MemoryCategory::workspace);
  for (const Piece& piece : pieces_)
    copy_converted(at(params, piece), piece.shard->value);
  state.flat.emplace_back("param", params);
  std::vector<std::string> names;
  for (const Piece& piece : pieces_)
    names.push_back(piece.shard->name);
  for (const auto& [kind, tensors] : state_by_kind(precision_.optimizer(), pieces_.size(), names)) {
    Tensor values = Tensor::zeros({range_.size()}, DType::f32, device_, MemoryCategory::workspace);
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      if (tensors[p] != nullptr) copy_converted(at(values, pieces_[p]), *tensors[p]);
    }
    state.flat.emplace_back(kind, values);
  }
  return state;
}

void ZeroShard::load_sharded_state(const ShardedState& state) {
  ALLOY_CHECK(
      state.total == total_ && state.range.begin == range_.begin && state.range.end == range_.end,
      "zero: a shard of elements [", state.range.begin, ", ", state.range.end, ") of ", state.total,
      " cannot load into rank ", group_.rank(), "'s [", range_.begin, ", ", range_.end, ") of ",
      total_);
  const auto find = [&](const std::string& kind) -> const Tensor& {
    for (const auto& [name, values] : state.flat) {
      if (name != kind) continue;
      ALLOY_CHECK(values.numel() == range_.size(), "zero: the shard's ", kind, " has ",
                  values.numel(), " elements, not ", range_.size());
      return values;
    }
    fail("zero: the shard has no ", kind, " values");
  };
  const auto at = [&](const Tensor& flat, const Piece& piece) {
    return flat.view(static_cast<std::size_t>(starts_[piece.param] + piece.first - range_.begin) *
                         dtype_size(flat.dtype()),
                     {piece.count}, flat.dtype());
  };
  const Tensor& params = find("param");
  for (const Piece& piece : pieces_)
    copy_converted(piece.shard->value, at(params, piece));
  std::vector<std::string> names;
  for (const Piece& piece : pieces_)
    names.push_back(piece.shard->name);
  for (const auto& [kind, tensors] : state_by_kind(precision_.optimizer(), pieces_.size(), names)) {
    const Tensor& values = find(kind);
    for (std::size_t p = 0; p < pieces_.size(); ++p) {
      if (tensors[p] != nullptr) copy_converted(*tensors[p], at(values, pieces_[p]));
    }
  }
  std::vector<const Tensor*> sources;
  std::vector<Tensor*> targets;
  for (Piece& piece : pieces_) {
    if (!piece.master) continue;
    sources.push_back(&piece.shard->value);
    targets.push_back(&piece.model_copy);
  }
  if (!sources.empty()) amp::copy_masters_to_model(sources, targets);
  gather_model();
}

}  // namespace alloy::app
