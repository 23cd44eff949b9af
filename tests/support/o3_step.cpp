#include "tests/support/o3_step.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "amp/opt_level.h"
#include "apps/train/normalization.h"
#include "core/data/sampler.h"
#include "core/error.h"
#include "core/half.h"
#include "core/models/models.h"
#include "core/nn/flatten.h"
#include "core/nn/pool2d.h"
#include "core/nn/relu.h"
#include "core/ops/pool2d.h"
#include "core/ops/softmax_cross_entropy.h"
#include "core/ops/step_tally.h"
#include "core/random.h"

namespace alloy::test {

namespace {

Tensor copy_to(const Tensor& source, Device device) {
  Tensor copy = Tensor::empty(source.shape(), source.dtype(), device, source.category());
  copy.copy_from(source);
  return copy;
}

// Element i as a float, and as an integer that orders the dtype's values with one step per
// representable value (+0 and -0 both 0).
float value_at(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::f32:
      return t.data<float>()[i];
    case DType::f16:
      return half_bits_to_float(t.half_data()[i]);
    case DType::bf16:
      return bf16_bits_to_float(t.half_data()[i]);
    default:
      fail("o3_step: no floating value in a ", dtype_name(t.dtype()), " tensor");
  }
}

std::int64_t ordered_at(const Tensor& t, std::int64_t i) {
  if (t.dtype() == DType::f32) {
    const std::uint32_t bits = float_bits(t.data<float>()[i]);
    const std::int64_t magnitude = bits & 0x7fffffffu;
    return bits & 0x80000000u ? -magnitude : magnitude;
  }
  const std::uint16_t bits = t.half_data()[i];
  const std::int64_t magnitude = bits & 0x7fffu;
  return bits & 0x8000u ? -magnitude : magnitude;
}

}  // namespace

RecipeModel make_recipe_lenet(amp::OptLevel level, Device device, std::uint64_t seed,
                              const amp::AmpOverrides& overrides) {
  Generator generator(seed);
  RecipeModel recipe;
  recipe.model = models::make_model("lenet", generator, 10, models::image_shape_of({1, 28, 28}));
  recipe.model->to_device(device);
  recipe.model->set_needs_input_grad(false);
  // traced_step runs the children itself: the first needs no input gradient, as in
  // Sequential::backward.
  recipe.net()[0].set_needs_input_grad(false);
  optim::OptimizerConfig config;
  config.lr = kRecipeLr;
  config.rounding_key = seed;
  recipe.precision = std::make_unique<amp::MixedPrecision>(
      amp::resolve_properties(level, overrides), *recipe.model, config);
  return recipe;
}

data::Dataset recipe_training_set() {
  try {
    return data::load_datasets("fashion-mnist", ALLOY_TEST_DATA_DIR, 0).train;
  } catch (const Error& error) {
    std::cerr << "o3_step: no Fashion-MNIST (" << error.what()
              << "): the synthetic set of its shape instead\n";
    return data::load_datasets("synthetic", "", 1).train;
  }
}

Batch gather_batch(const data::Dataset& set, const std::vector<std::int64_t>& indices,
                   Device device) {
  const Shape example = set.example_shape();
  const std::int64_t bytes = example[0] * example[1] * example[2];
  const auto rows = static_cast<std::int64_t>(indices.size());
  Tensor images = Tensor::empty({rows, example[0], example[1], example[2]}, DType::u8);
  Tensor labels = Tensor::empty({rows}, DType::i32);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t i = indices[static_cast<std::size_t>(r)];
    std::memcpy(images.data<std::uint8_t>() + r * bytes,
                set.images.data<std::uint8_t>() + i * bytes, static_cast<std::size_t>(bytes));
    labels.data<std::int32_t>()[r] = set.labels.data<std::int32_t>()[i];
  }
  return {copy_to(images, device), copy_to(labels, device)};
}

Batch recipe_batch(const data::Dataset& set, std::int64_t step, Device device, std::uint64_t seed) {
  const std::int64_t per_epoch = set.size() / kRecipeBatch;
  const std::vector<std::int64_t> order =
      data::Sampler(set.size(), seed, true).epoch_indices(step / per_epoch);
  const auto first = order.begin() + (step % per_epoch) * kRecipeBatch;
  return gather_batch(set, {first, first + kRecipeBatch}, device);
}

const Tensor& StepTrace::at(const std::string& name) const {
  for (const TraceEntry& entry : entries) {
    if (entry.name == name) return entry.value;
  }
  fail("o3_step: the trace has no '", name, "'");
}

StepTrace traced_step(RecipeModel& recipe, const Batch& batch, const StepTrace* feed, bool update) {
  nn::Sequential& net = recipe.net();
  amp::MixedPrecision& precision = *recipe.precision;
  const Device device = batch.images.device();
  StepTrace trace;
  // Records `value` as `name` and returns what the next op reads: value, or feed's.
  const auto pass = [&](const std::string& name, const Tensor& value) {
    trace.entries.push_back({name, copy_to(value, Device::cpu())});
    return feed ? copy_to(feed->at(name), device) : value;
  };
  struct Op {
    std::size_t first, size;
    std::string name;
  };
  std::vector<Op> ops;
  const auto fused_pool = [&](std::size_t i) -> nn::AvgPool2d* {
    auto* pool = i + 1 < net.size() ? dynamic_cast<nn::AvgPool2d*>(&net[i + 1]) : nullptr;
    const bool fuses = dynamic_cast<nn::ReLU*>(&net[i]) != nullptr && pool != nullptr &&
                       relu_avg_pool2d_fuses(pool->params(), pool->layout());
    return fuses ? pool : nullptr;
  };
  const auto is_flatten = [&](const Op& op) {
    return dynamic_cast<nn::Flatten*>(&net[op.first]) != nullptr;
  };

  for (nn::Parameter* parameter : net.parameters())
    trace.entries.push_back(
        {parameter->name + " before", copy_to(parameter->value, Device::cpu())});
  Tensor x = pass("input", app::normalize_batch(batch.images, Tensor(), precision.input_dtype()));
  for (std::size_t i = 0; i < net.size(); i += ops.back().size) {
    if (nn::AvgPool2d* pool = fused_pool(i)) {
      ops.push_back({i, 2, std::to_string(i) + "-" + std::to_string(i + 1) + " relu+pool"});
      x = static_cast<nn::ReLU&>(net[i]).forward_with_pool(*pool, x);
    } else {
      std::string kind = net[i].type_name();
      for (char& c : kind)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      ops.push_back({i, 1, std::to_string(i) + " " + kind});
      x = net[i].forward(x);
    }
    if (!is_flatten(ops.back())) x = pass(ops.back().name + " y", x);
  }

  Tensor tally = make_step_tally(device);
  const SoftmaxCrossEntropyStep loss = softmax_cross_entropy_step(
      x, batch.labels, precision.loss_scale(), tally, batch.labels.numel(), 0.0f);
  pass("loss", loss.loss);
  Tensor dy = pass("dlogits", loss.dlogits);
  for (auto op = ops.rbegin(); op != ops.rend(); ++op) {
    const Tensor dx =
        op->size == 2
            ? static_cast<nn::ReLU&>(net[op->first]).backward_with_pool(*fused_pool(op->first), dy)
            : net[op->first].backward(dy);
    for (nn::Parameter* parameter : net[op->first].parameters()) {
      trace.entries.push_back({parameter->name + " grad", copy_to(parameter->grad, Device::cpu())});
      if (feed) parameter->grad.copy_from(feed->at(parameter->name + " grad"));
    }
    if (!dx.defined()) break;  // the first layer's
    dy = is_flatten(*op) ? dx : pass(op->name + " dx", dx);
  }
  if (update) {
    precision.step();
    for (nn::Parameter* parameter : net.parameters()) {
      trace.entries.push_back(
          {parameter->name + " updated", copy_to(parameter->value, Device::cpu())});
    }
  }
  net.zero_grad();
  return trace;
}

void copy_weights(RecipeModel& to, const RecipeModel& from) {
  const std::vector<nn::Parameter*> targets = to.model->parameters();
  const std::vector<nn::Parameter*> sources = from.model->parameters();
  ALLOY_CHECK(targets.size() == sources.size(), "copy_weights: ", sources.size(),
              " parameters into ", targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    Tensor host = copy_to(sources[i]->value, Device::cpu());
    if (host.dtype() != targets[i]->value.dtype()) {
      host = Tensor::from_floats(host.shape(), host.to_floats(), targets[i]->value.dtype(),
                                 host.category());
    }
    targets[i]->value.copy_from(host);
  }
}

TensorDiff diff_tensors(const Tensor& a, const Tensor& b) {
  ALLOY_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), "diff_tensors: ", a.str(), " and ",
              b.str());
  TensorDiff d;
  d.count = a.numel();
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const std::int64_t ulp = std::llabs(ordered_at(a, i) - ordered_at(b, i));
    if (ulp == 0) continue;
    ++d.differing;
    d.max_ulp = std::max(d.max_ulp, ulp);
    d.max_abs = std::max(d.max_abs, std::fabs(double{value_at(a, i)} - value_at(b, i)));
  }
  return d;
}

std::int64_t count_apart(const Tensor& a, const Tensor& b, std::int64_t ulps, double atol) {
  ALLOY_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), "count_apart: ", a.str(), " and ",
              b.str());
  std::int64_t apart = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    apart += std::llabs(ordered_at(a, i) - ordered_at(b, i)) > ulps &&
             std::fabs(double{value_at(a, i)} - value_at(b, i)) > atol;
  }
  return apart;
}

double relative_error(const Tensor& half, const Tensor& reference, double scale) {
  double error = 0.0, norm = 0.0;
  for (std::int64_t i = 0; i < half.numel(); ++i) {
    const double exact = value_at(reference, i);
    const double value = value_at(half, i) / scale;
    error += (value - exact) * (value - exact);
    norm += exact * exact;
  }
  return norm > 0.0 ? std::sqrt(error / norm) : std::sqrt(error);
}

Underflow underflow(const Tensor& half, const Tensor& reference, const Tensor& w, float lr) {
  Underflow counts;
  for (std::int64_t i = 0; i < half.numel(); ++i) {
    const float exact = value_at(reference, i);
    if (value_at(half, i) != 0.0f || exact == 0.0f) continue;
    ++counts.flushed;
    if (!w.defined()) continue;
    const float weight = value_at(w, i);
    counts.would_move += round_to_half(weight - lr * exact) != weight;
  }
  return counts;
}

LostUpdates lost_updates(const Tensor& w, const Tensor& g, float lr) {
  ALLOY_CHECK(w.dtype() == DType::f16 && w.numel() == g.numel(), "lost_updates: ", w.str(), " and ",
              g.str());
  LostUpdates counts;
  for (std::int64_t i = 0; i < w.numel(); ++i) {
    const float weight = value_at(w, i), grad = value_at(g, i);
    if (grad == 0.0f) continue;
    ++counts.nonzero;
    counts.lost += round_to_half(weight - lr * grad) == weight;
  }
  return counts;
}

}  // namespace alloy::test
