// The amp step end to end on small models: each opt level's dtypes, O1's cast decisions, O2's
// master/model consistency after a step, skipped steps leaving every weight untouched, clipping,
// O2's bits without fp32 master gradients, and the weight averages (--ema-decay) following each
// applied step.
#include "amp/mixed_precision.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "amp/ops/unscale.h"
#include "core/half.h"
#include "core/models/models.h"
#include "core/nn/batch_norm2d.h"
#include "core/nn/cast_policy.h"
#include "core/nn/conv2d.h"
#include "core/nn/dropout.h"
#include "core/nn/flatten.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/relu.h"
#include "core/nn/residual_block.h"
#include "core/ops/clip_grad_norm.h"
#include "core/ops/optimizer_update.h"
#include "core/ops/softmax_cross_entropy.h"
#include "core/random.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::amp;

namespace {

optim::OptimizerConfig sgd(float lr, float momentum) {
  optim::OptimizerConfig config;
  config.kind = "sgd";
  config.lr = lr;
  config.momentum = momentum;
  return config;
}

// Sets the process-wide O1 policy for one test and restores "off" afterwards.
struct ScopedCastPolicy {
  explicit ScopedCastPolicy(const AmpProperties& properties) {
    nn::CastPolicy policy;
    policy.enabled = properties.cast_policy;
    policy.half_dtype = properties.half_dtype;
    nn::set_cast_policy(policy);
  }
  ~ScopedCastPolicy() { nn::set_cast_policy({}); }
};

struct Fixture {
  Fixture(OptLevel level, const AmpOverrides& overrides = {}, const char* model_name = "lenet")
      : properties(resolve_properties(level, overrides)), policy(properties) {
    Generator generator(7);
    model = models::make_model(model_name, generator, 10);
    model->set_needs_input_grad(false);
    precision = std::make_unique<MixedPrecision>(properties, *model, sgd(0.1f, 0.9f));
  }

  // One forward/backward on random images with the scaled loss; returns the loss.
  float forward_backward(std::uint64_t seed) {
    Generator generator(seed);
    const Tensor images =
        test::random_tensor({4, 1, 28, 28}, properties.model_dtype, generator, 0.0f, 1.0f);
    std::vector<float> labels;
    for (int i = 0; i < 4; ++i)
      labels.push_back(static_cast<float>(generator.below(10)));
    const Tensor label_tensor = Tensor::from_floats({4}, labels, DType::i32);
    nn::clear_weight_cast_cache();
    const Tensor logits = model->forward(images);
    const SoftmaxCrossEntropyResult loss = softmax_cross_entropy_forward(logits, label_tensor);
    model->backward(softmax_cross_entropy_backward(loss.probabilities, label_tensor,
                                                   precision->loss_scale(), logits.dtype()));
    return loss.loss.to_floats()[0];
  }

  void step() {
    precision->step();
    model->zero_grad();
    nn::clear_weight_cast_cache();
  }

  AmpProperties properties;
  ScopedCastPolicy policy;
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<MixedPrecision> precision;
};

std::vector<std::uint16_t> bits16(const Tensor& tensor) {
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(tensor.numel()));
  std::memcpy(bits.data(), tensor.raw(), bits.size() * sizeof(std::uint16_t));
  return bits;
}

std::vector<float> values(const Tensor& tensor) {
  return tensor.to_floats();
}

// model parameter == half(master) bit for bit, for every half parameter.
void check_model_is_rounded_masters(Fixture& f) {
  const auto model_params = f.model->parameters();
  const auto canonical = f.precision->canonical_parameters();
  BOOST_TEST_REQUIRE(model_params.size() == canonical.size());
  int half_params = 0;
  for (std::size_t i = 0; i < model_params.size(); ++i) {
    const Tensor& half_value = model_params[i]->value;
    if (half_value.dtype() == DType::f32) continue;
    ++half_params;
    BOOST_TEST_REQUIRE((canonical[i]->value.dtype() == DType::f32));
    const std::vector<float> master = values(canonical[i]->value);
    const std::vector<std::uint16_t> model_bits = bits16(half_value);
    std::size_t mismatches = 0;
    for (std::size_t j = 0; j < master.size(); ++j) {
      const std::uint16_t expected = half_value.dtype() == DType::f16
                                         ? float_to_half_bits(master[j])
                                         : float_to_bf16_bits(master[j]);
      if (model_bits[j] != expected) ++mismatches;
    }
    BOOST_TEST(mismatches == 0u,
               model_params[i]->name << ": " << mismatches << " elements differ from half(master)");
  }
  BOOST_TEST(half_params > 0);
}

// The gradients a step's update reads (the canonical parameters'), in float64.
std::vector<std::vector<double>> canonical_gradients(Fixture& f) {
  std::vector<std::vector<double>> grads;
  for (nn::Parameter* p : f.precision->canonical_parameters())
    grads.push_back(test::to_doubles(p->grad));
  return grads;
}

std::vector<std::vector<double>> canonical_weights(Fixture& f) {
  std::vector<std::vector<double>> weights;
  for (nn::Parameter* p : f.precision->canonical_parameters())
    weights.push_back(test::to_doubles(p->value));
  return weights;
}

double l2_norm(const std::vector<std::vector<double>>& tensors) {
  double sum = 0.0;
  for (const auto& values : tensors) {
    for (const double value : values)
      sum += value * value;
  }
  return std::sqrt(sum);
}

// The step's change of the canonical weights.
std::vector<std::vector<double>> weight_change(const std::vector<std::vector<double>>& before,
                                               Fixture& f) {
  std::vector<std::vector<double>> change = canonical_weights(f);
  for (std::size_t i = 0; i < change.size(); ++i) {
    for (std::size_t j = 0; j < change[i].size(); ++j)
      change[i][j] -= before[i][j];
  }
  return change;
}

float read_scalar(const Tensor& scalar) {
  return scalar.to_floats()[0];
}

// The weight averages' contract (core/ops/ema_update.h), on the host: one step of
// average = fma(decay, average, (1 - decay) * value), the product rounded on its own.
void average_on_host(std::vector<float>& average, const std::vector<float>& value, float decay) {
  const float rest = 1.0f - decay;
  for (std::size_t i = 0; i < average.size(); ++i)
    average[i] = std::fma(decay, average[i], rest * value[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(mixed_precision)

BOOST_AUTO_TEST_CASE(each_level_stores_the_dtypes_its_table_says) {
  {
    Fixture o0(OptLevel::O0, {}, "resnet18");
    for (nn::Parameter* p : o0.model->parameters())
      BOOST_TEST((p->value.dtype() == DType::f32));
    BOOST_TEST((o0.precision->canonical_parameters() == o0.model->parameters()));
  }
  {
    Fixture o1(OptLevel::O1, {}, "resnet18");
    for (nn::Parameter* p : o1.model->parameters())
      BOOST_TEST((p->value.dtype() == DType::f32));
    BOOST_TEST((o1.precision->canonical_parameters() == o1.model->parameters()));
  }
  {
    Fixture o2(OptLevel::O2, {}, "resnet18");
    const auto canonical = o2.precision->canonical_parameters();
    const auto params = o2.model->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const DType expected = params[i]->is_norm ? DType::f32 : DType::f16;
      BOOST_TEST((params[i]->value.dtype() == expected), params[i]->name);
      BOOST_TEST((canonical[i]->value.dtype() == DType::f32), canonical[i]->name);
      BOOST_TEST((canonical[i] != params[i]) == !params[i]->is_norm, params[i]->name);
    }
    for (nn::Buffer* b : o2.model->buffers())
      BOOST_TEST((b->value.dtype() == DType::f32));
  }
  {
    Fixture o3(OptLevel::O3, {}, "resnet18");
    for (nn::Parameter* p : o3.model->parameters())
      BOOST_TEST((p->value.dtype() == DType::f16));
    for (nn::Buffer* b : o3.model->buffers())
      BOOST_TEST((b->value.dtype() == DType::f16));
    BOOST_TEST((o3.precision->canonical_parameters() == o3.model->parameters()));
  }
  {
    AmpOverrides bf16;
    bf16.half_dtype = DType::bf16;
    Fixture o2(OptLevel::O2, bf16, "lenet");
    for (nn::Parameter* p : o2.model->parameters())
      BOOST_TEST((p->value.dtype() == DType::bf16));
    BOOST_TEST(!o2.properties.loss_scale.dynamic);
  }
}

BOOST_AUTO_TEST_CASE(o1_computes_linear_in_half_and_norm_statistics_in_fp32) {
  AmpProperties properties = resolve_properties(OptLevel::O1, {});
  ScopedCastPolicy policy(properties);
  BOOST_TEST((nn::compute_dtype(nn::OpClass::half_compute, DType::f32, DType::f32) == DType::f16));
  BOOST_TEST((nn::compute_dtype(nn::OpClass::fp32_compute, DType::f16, DType::f16) == DType::f32));
  BOOST_TEST((nn::compute_dtype(nn::OpClass::follow_input, DType::f16, DType::f32) == DType::f16));
  BOOST_TEST((nn::compute_dtype(nn::OpClass::promote, DType::f16, DType::f32) == DType::f32));
  BOOST_TEST((nn::compute_dtype(nn::OpClass::promote, DType::f16, DType::f16) == DType::f16));
  // Batch norm keeps its input's dtype with fp32 parameters, and takes half parameters' own.
  BOOST_TEST(
      (nn::compute_dtype(nn::OpClass::fp32_statistics, DType::f16, DType::f32) == DType::f16));
  BOOST_TEST(
      (nn::compute_dtype(nn::OpClass::fp32_statistics, DType::f32, DType::f32) == DType::f32));
  BOOST_TEST(
      (nn::compute_dtype(nn::OpClass::fp32_statistics, DType::f32, DType::f16) == DType::f16));

  Generator generator(3);
  nn::Linear linear(6, 5);
  nn::ReLU relu;
  nn::BatchNorm2d norm(5);
  for (nn::Parameter* p : linear.parameters()) {
    p->value.copy_from(test::random_tensor(p->value.shape(), DType::f32, generator));
  }
  linear.zero_grad();
  const Tensor x = test::random_tensor({4, 6}, DType::f32, generator);
  const Tensor y = linear.forward(x);
  BOOST_TEST((y.dtype() == DType::f16));  // fp32 input and weights, half compute
  BOOST_TEST((relu.forward(y).dtype() == DType::f16));
  // Half in, half out; the statistics land in the fp32 running buffers.
  const Tensor normed = norm.forward(y.reshape({4, 5, 1, 1}));
  BOOST_TEST((normed.dtype() == DType::f16));
  BOOST_TEST((norm.running_mean().value.dtype() == DType::f32));
  BOOST_TEST(norm.running_mean().value.to_floats() != std::vector<float>(5, 0.0f));
  const Tensor dnormed = norm.backward(test::random_tensor({4, 5, 1, 1}, DType::f16, generator));
  BOOST_TEST((dnormed.dtype() == DType::f16));
  BOOST_TEST((norm.weight().grad.dtype() == DType::f32));
  // Gradients flow back in the input's dtype and land in fp32 weight gradients.
  const Tensor dx = linear.backward(test::random_tensor({4, 5}, DType::f32, generator));
  BOOST_TEST((dx.dtype() == DType::f32));
  for (nn::Parameter* p : linear.parameters())
    BOOST_TEST((p->grad.dtype() == DType::f32));

  // The weight gradient is dy^T x from the half-rounded operands, accumulated in fp32.
  nn::set_cast_policy({});
  BOOST_TEST((nn::compute_dtype(nn::OpClass::half_compute, DType::f32, DType::f32) == DType::f32));
}

// Every module the models are built from, fed an fp32 and a half input: conv and linear compute
// in half, the loss in fp32, batch norm keeps its input's dtype (with fp32 statistics),
// relu/pool/flatten follow their input, and the residual add promotes. With the policy off (O0)
// everything stays fp32.
BOOST_AUTO_TEST_CASE(o1_decides_the_dtype_of_every_module_and_the_loss) {
  struct Case {
    const char* name;
    std::function<std::unique_ptr<nn::Module>()> make;
    Shape input;
    // Output dtype for an f32 and for a half input; kHalf stands for the policy's half type.
    DType from_f32;
    DType from_half;
  };
  constexpr DType kHalf = DType::f16;  // replaced by the half type under test
  const std::vector<Case> cases{
      {"Conv2d",
       [] { return std::make_unique<nn::Conv2d>(2, 3, 3, 1, 1); },
       {2, 2, 5, 5},
       kHalf,
       kHalf},
      {"Linear", [] { return std::make_unique<nn::Linear>(6, 4); }, {3, 6}, kHalf, kHalf},
      {"BatchNorm2d",
       [] { return std::make_unique<nn::BatchNorm2d>(2); },
       {3, 2, 4, 4},
       DType::f32,
       kHalf},
      {"ReLU", [] { return std::make_unique<nn::ReLU>(); }, {3, 5}, DType::f32, kHalf},
      {"MaxPool2d",
       [] { return std::make_unique<nn::MaxPool2d>(2); },
       {1, 2, 4, 4},
       DType::f32,
       kHalf},
      {"AvgPool2d",
       [] { return std::make_unique<nn::AvgPool2d>(2); },
       {1, 2, 4, 4},
       DType::f32,
       kHalf},
      {"Flatten", [] { return std::make_unique<nn::Flatten>(); }, {2, 2, 3, 3}, DType::f32, kHalf},
      // Its branch (conv, batch norm) ends in half; the identity skip brings the input's
      // dtype, and an fp32 one promotes the sum.
      {"ResidualBlock",
       [] { return std::make_unique<nn::ResidualBlock>(2, 2); },
       {2, 2, 4, 4},
       DType::f32,
       kHalf},
      // The shortcut (conv, batch norm) is half too.
      {"ResidualBlock+shortcut",
       [] { return std::make_unique<nn::ResidualBlock>(2, 3, 2); },
       {2, 2, 4, 4},
       kHalf,
       kHalf},
  };
  for (const DType half : {DType::f16, DType::bf16}) {
    AmpOverrides overrides;
    overrides.half_dtype = half;
    const AmpProperties o1 = resolve_properties(OptLevel::O1, overrides);
    const auto expected = [&](DType dtype) { return dtype == kHalf ? half : dtype; };
    for (const bool enabled : {true, false}) {
      std::optional<ScopedCastPolicy> policy;
      if (enabled) policy.emplace(o1);
      for (const Case& c : cases) {
        for (const DType input_dtype : {DType::f32, half}) {
          if (!enabled && input_dtype != DType::f32) continue;  // O0 feeds fp32 only
          const DType want = !enabled                    ? DType::f32
                             : input_dtype == DType::f32 ? expected(c.from_f32)
                                                         : expected(c.from_half);
          BOOST_TEST_CONTEXT(c.name << " " << dtype_name(input_dtype) << " input, O1 "
                                    << (enabled ? "on" : "off") << ", half " << dtype_name(half)) {
            Generator generator(11);
            std::unique_ptr<nn::Module> module = c.make();
            const Tensor x = test::random_tensor(c.input, input_dtype, generator);
            const Tensor y = module->forward(x);
            BOOST_TEST(dtype_name(y.dtype()) == dtype_name(want));
            // Gradients go back in the input's dtype.
            module->set_needs_input_grad(true);
            const Tensor dx =
                module->backward(test::random_tensor(y.shape(), y.dtype(), generator));
            BOOST_TEST(dtype_name(dx.dtype()) == dtype_name(input_dtype));
            nn::clear_weight_cast_cache();
          }
        }
      }
      // The loss: fp32 whatever the logits' dtype; its gradient in the logits' dtype.
      Generator generator(13);
      const Tensor labels = Tensor::from_floats({3}, {0.0f, 2.0f, 1.0f}, DType::i32);
      for (const DType logits_dtype : {DType::f32, half}) {
        const Tensor logits = test::random_tensor({3, 4}, logits_dtype, generator);
        const SoftmaxCrossEntropyResult loss = softmax_cross_entropy_forward(logits, labels);
        BOOST_TEST(dtype_name(loss.loss.dtype()) == "f32");
        BOOST_TEST(dtype_name(loss.probabilities.dtype()) == "f32");
        const Tensor dlogits =
            softmax_cross_entropy_backward(loss.probabilities, labels, 1.0f, logits_dtype);
        BOOST_TEST(dtype_name(dlogits.dtype()) == dtype_name(logits_dtype));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(o1_weight_casts_are_cached_for_one_step) {
  AmpProperties properties = resolve_properties(OptLevel::O1, {});
  ScopedCastPolicy policy(properties);
  Generator generator(5);
  const Tensor weight = test::random_tensor({3, 3}, DType::f32, generator);
  const Tensor& first = nn::cached_weight_cast(weight, DType::f16);
  const Tensor& again = nn::cached_weight_cast(weight, DType::f16);
  BOOST_TEST(first.raw() == again.raw());
  BOOST_TEST((first.dtype() == DType::f16));
  const auto before = memory_stats(Device::cpu()).snapshot();
  nn::clear_weight_cast_cache();
  const auto after = memory_stats(Device::cpu()).snapshot();
  BOOST_TEST(after.current[static_cast<int>(MemoryCategory::workspace)] <
             before.current[static_cast<int>(MemoryCategory::workspace)]);
}

BOOST_AUTO_TEST_CASE(o2_model_equals_half_of_masters_after_each_step) {
  Fixture f(OptLevel::O2);
  check_model_is_rounded_masters(f);
  for (std::uint64_t step = 0; step < 3; ++step) {
    const float loss = f.forward_backward(100 + step);
    BOOST_TEST(std::isfinite(loss));
    f.step();
    check_model_is_rounded_masters(f);
  }
  BOOST_TEST(f.precision->scaler().snapshot().skipped_steps == 0);
}

BOOST_AUTO_TEST_CASE(o2_masters_move_by_less_than_half_precision_allows) {
  // The update happens on the fp32 masters: a step far below the half model's resolution
  // still changes them (the reason masters exist).
  Fixture f(OptLevel::O2);
  const std::vector<float> before = values(f.precision->canonical_parameters()[0]->value);
  f.forward_backward(11);
  f.step();
  const std::vector<float> after = values(f.precision->canonical_parameters()[0]->value);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < before.size(); ++i)
    changed += before[i] != after[i];
  BOOST_TEST(changed > before.size() / 2);
}

BOOST_AUTO_TEST_CASE(a_skipped_step_leaves_masters_model_and_momentum_untouched) {
  Fixture f(OptLevel::O2);
  f.forward_backward(21);
  f.step();  // a clean step first, so momentum buffers hold values
  const float scale_before = f.precision->scaler().snapshot().scale;

  std::vector<std::vector<float>> masters;
  std::vector<std::vector<std::uint16_t>> model_bits;
  for (nn::Parameter* p : f.precision->canonical_parameters())
    masters.push_back(values(p->value));
  for (nn::Parameter* p : f.model->parameters()) {
    model_bits.push_back(p->value.dtype() == DType::f32 ? std::vector<std::uint16_t>()
                                                        : bits16(p->value));
  }
  std::vector<std::vector<float>> momentum;
  for (const auto& state : f.precision->optimizer().state())
    momentum.push_back(values(*state.value));

  f.forward_backward(22);
  // Poison one gradient in the middle of the model with inf, another with NaN.
  const auto params = f.model->parameters();
  nn::Parameter& poisoned = *params[2];
  const std::uint16_t inf_bits = 0x7c00;
  std::memcpy(poisoned.grad.raw(), &inf_bits, sizeof inf_bits);
  const std::uint16_t nan_bits = 0x7e00;
  std::memcpy(static_cast<char*>(params[4]->grad.raw()) + 2, &nan_bits, sizeof nan_bits);
  f.precision->step();

  const ScalerSnapshot after = f.precision->scaler().snapshot();
  BOOST_TEST(after.skipped_steps == 1);
  BOOST_TEST(after.scale == scale_before / 2);
  BOOST_TEST(after.first_overflow == 2);
  BOOST_TEST(f.precision->parameter_name(after.first_overflow) == poisoned.name);
  std::size_t index = 0;
  for (nn::Parameter* p : f.precision->canonical_parameters()) {
    BOOST_TEST(values(p->value) == masters[index++], p->name);
  }
  index = 0;
  for (nn::Parameter* p : f.model->parameters()) {
    if (p->value.dtype() != DType::f32) BOOST_TEST(bits16(p->value) == model_bits[index], p->name);
    ++index;
  }
  index = 0;
  for (const auto& state : f.precision->optimizer().state()) {
    BOOST_TEST(values(*state.value) == momentum[index++], state.name);
  }
}

BOOST_AUTO_TEST_CASE(o3_updates_half_parameters_in_place) {
  Fixture f(OptLevel::O3);
  const auto params = f.model->parameters();
  const std::vector<std::uint16_t> before = bits16(params[0]->value);
  f.forward_backward(31);
  f.step();
  BOOST_TEST((params[0]->value.dtype() == DType::f16));
  BOOST_TEST(bits16(params[0]->value) != before);
  BOOST_TEST(f.precision->scaler().snapshot().scale == 1.0f);
}

// torch.nn.utils.clip_grad_norm_ at O0 (no scaler, the raw gradients): the first SGD step with
// momentum moves each weight by -lr * coefficient * grad, coefficient = max / (norm + 1e-6)
// from the float64 norm of the gradients.
BOOST_AUTO_TEST_CASE(o0_clipping_is_pytorchs_clip_grad_norm) {
  Fixture f(OptLevel::O0);
  f.forward_backward(41);
  const std::vector<std::vector<double>> grads = canonical_gradients(f);
  const std::vector<std::vector<double>> before = canonical_weights(f);
  const double norm = l2_norm(grads);
  const auto max_norm = static_cast<float>(norm / 4);
  const double coefficient = std::min(max_norm / (norm + 1e-6), 1.0);
  f.precision->set_clip_grad_norm(max_norm);
  f.step();
  BOOST_TEST(read_scalar(f.precision->clip_norm()) == norm, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(read_scalar(f.precision->clip_coefficient()) == coefficient,
             boost::test_tools::tolerance(1e-6));
  const double lr = 0.1;
  std::size_t unclipped_would_fail = 0, values = 0;
  const auto params = f.precision->canonical_parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::vector<double> expected = before[i];
    for (std::size_t j = 0; j < expected.size(); ++j) {
      expected[j] -= lr * coefficient * grads[i][j];
      if (grads[i][j] == 0.0) continue;  // ReLUs that were off: no change either way
      const double unclipped = before[i][j] - lr * grads[i][j];
      unclipped_would_fail += std::fabs(unclipped - expected[j]) > 1e-6 * std::fabs(expected[j]);
      ++values;
    }
    test::check_close(params[i]->value, expected, 1e-6, 1e-9, params[i]->name);
  }
  BOOST_TEST(unclipped_would_fail > values * 9 / 10);  // the tolerance tells clipped from not
  const ClipTally tally = read_clip_tally(f.precision->clip_tally());
  BOOST_TEST(tally.finite_steps == 1);
  BOOST_TEST(tally.clipped_steps == 1);
}

// At O2 with the loss scale at 2^16, the clip acts on the unscaled fp32 master gradients: the
// norm, the coefficient and the step equal O0's on the same batch within half rounding, and
// not what clipping the scaled gradients (65536 times larger) would give.
BOOST_AUTO_TEST_CASE(o2_clips_the_unscaled_gradients) {
  Fixture o0(OptLevel::O0);
  Fixture o2(OptLevel::O2);
  BOOST_TEST_REQUIRE(read_scalar(o2.precision->loss_scale()) == 65536.0f);
  o0.forward_backward(51);
  o2.forward_backward(51);
  const double norm = l2_norm(canonical_gradients(o0));
  const auto max_norm = static_cast<float>(norm / 4);
  const std::vector<std::vector<double>> before0 = canonical_weights(o0);
  const std::vector<std::vector<double>> before2 = canonical_weights(o2);
  BOOST_TEST_REQUIRE((before0 == before2));  // the same fp32 initial weights
  for (Fixture* f : {&o0, &o2}) {
    f->precision->set_clip_grad_norm(max_norm);
    f->step();
  }
  BOOST_TEST(o2.precision->scaler().snapshot().skipped_steps == 0);
  const double coefficient0 = read_scalar(o0.precision->clip_coefficient());
  const double coefficient2 = read_scalar(o2.precision->clip_coefficient());
  BOOST_TEST(read_scalar(o2.precision->clip_norm()) == norm, boost::test_tools::tolerance(2e-2));
  BOOST_TEST(coefficient2 == coefficient0, boost::test_tools::tolerance(2e-2));
  const double scaled_clip = max_norm / (65536.0 * norm + 1e-6);  // the classic mistake
  BOOST_TEST(coefficient2 > 1000 * scaled_clip);
  // The masters moved as O0's weights did: by lr * max_norm in all.
  const std::vector<std::vector<double>> change0 = weight_change(before0, o0);
  const std::vector<std::vector<double>> change2 = weight_change(before2, o2);
  BOOST_TEST(l2_norm(change0) == 0.1 * max_norm, boost::test_tools::tolerance(1e-4));
  BOOST_TEST(l2_norm(change2) == 0.1 * max_norm, boost::test_tools::tolerance(2e-2));
  std::vector<std::vector<double>> difference = change2;
  for (std::size_t i = 0; i < difference.size(); ++i) {
    for (std::size_t j = 0; j < difference[i].size(); ++j)
      difference[i][j] -= change0[i][j];
  }
  BOOST_TEST(l2_norm(difference) < 0.05 * l2_norm(change0));
}

// O2 keeps no fp32 master gradients: its pass only checks the half gradients, and the clip and
// the update multiply them by 1/scale as they read them. The result must still be the bits of
// the pipeline with the copies, replayed here with the ops (the model's gradients unscaled into
// fp32 tensors, the clip over those, the update from them): the clip's norm and coefficient, the
// masters, the momentum and the half model, bit for bit. On the ffn (half linear layers, fp32
// layer norms without masters), clipping every step, with the dynamic scale doubling after each
// step (window 1), so that the step must use the scale its gradients carry, not the new one.
// (With a power-of-two scale, the dynamic scaler's default, the order of the products could not
// change a bit: multiplying by a power of two is exact.)
BOOST_AUTO_TEST_CASE(o2_clips_and_updates_with_the_bits_of_fp32_master_gradients) {
  AmpOverrides overrides;
  overrides.window = 1;
  // Not a power of two, so that 1/scale is inexact and the order of the update's products shows;
  // low enough that three doublings do not overflow.
  overrides.init_scale = 384.0f;
  Fixture f(OptLevel::O2, overrides, "ffn");
  constexpr float kMaxNorm = 0.05f;
  f.precision->set_clip_grad_norm(kMaxNorm);
  const auto params = f.model->parameters();
  const auto canonical = f.precision->canonical_parameters();
  std::vector<Tensor> weights, momentum, copies, grads;
  std::vector<const Tensor*> model_grads, unscaled;
  std::vector<Tensor*> outputs;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& value = canonical[i]->value;
    weights.push_back(value.clone(MemoryCategory::workspace));
    momentum.push_back(Tensor::zeros(value.shape(), DType::f32));
    const bool mastered = canonical[i] != params[i];
    copies.push_back(mastered ? params[i]->value.clone(MemoryCategory::workspace) : Tensor());
    grads.push_back(Tensor::empty(value.shape(), DType::f32));
    model_grads.push_back(&params[i]->grad);
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    outputs.push_back(&grads[i]);
    unscaled.push_back(&grads[i]);
  }
  BOOST_TEST_REQUIRE(std::count_if(copies.begin(), copies.end(),
                                   [](const Tensor& t) { return !t.defined(); }) > 0);
  const Tensor lr = Tensor::from_floats({1}, {0.1f}, DType::f32);
  Tensor step = Tensor::zeros({2}, DType::i32);
  SgdHyper hyper;
  hyper.momentum = 0.9f;
  for (std::uint64_t k = 0; k < 3; ++k) {
    {
      const nn::DropoutStreamScope dropout({&f.precision->optimizer().step_count(), 0, 1});
      f.forward_backward(80 + k);
    }
    // The reference, before the step (which leaves the model's gradients as they are).
    const Tensor scale = f.precision->loss_scale().clone(MemoryCategory::workspace);
    Tensor found_inf = Tensor::zeros({1}, DType::f32);
    Tensor first_overflow = Tensor::zeros({1}, DType::i32);
    unscale_and_check(model_grads, outputs, scale, found_inf, first_overflow);
    BOOST_TEST_REQUIRE(read_scalar(found_inf) == 0.0f);
    Tensor norm = Tensor::zeros({1}, DType::f32);
    Tensor coefficient = Tensor::zeros({1}, DType::f32);
    Tensor no_tally;
    clip_grad_norm(unscaled, kMaxNorm, norm, coefficient, no_tally);
    std::vector<SgdTensors> tensors;
    for (std::size_t i = 0; i < params.size(); ++i) {
      tensors.push_back({&weights[i], &grads[i], &momentum[i],
                         copies[i].defined() ? &copies[i] : nullptr,
                         static_cast<std::uint32_t>(i)});
    }
    sgd_update(tensors, hyper, lr, step, found_inf, coefficient);

    f.step();
    BOOST_TEST_CONTEXT("step " << k) {
      BOOST_TEST(read_scalar(f.precision->loss_scale()) == 2 * read_scalar(scale));
      BOOST_TEST(read_scalar(coefficient) < 1.0f);  // the clip acted
      BOOST_TEST(read_scalar(f.precision->clip_norm()) == read_scalar(norm));
      BOOST_TEST(read_scalar(f.precision->clip_coefficient()) == read_scalar(coefficient));
      const auto state = f.precision->optimizer().state();
      BOOST_TEST_REQUIRE(state.size() == params.size());
      for (std::size_t i = 0; i < params.size(); ++i) {
        BOOST_TEST(test::same_bits(canonical[i]->value, weights[i]), canonical[i]->name);
        BOOST_TEST(test::same_bits(*state[i].value, momentum[i]), state[i].name);
        if (copies[i].defined()) {
          BOOST_TEST(test::same_bits(params[i]->value, copies[i]), params[i]->name);
        }
      }
    }
  }
}

// A step whose gradients overflow is skipped by the dynamic scaler as without clipping, and
// not counted by the clip's tally; the clean steps around it are.
BOOST_AUTO_TEST_CASE(a_step_the_scaler_skips_is_not_counted_as_clipped) {
  Fixture f(OptLevel::O2);
  f.precision->set_clip_grad_norm(1e-3f);  // far below these norms: every finite step clips
  f.forward_backward(61);
  f.step();
  const float first_norm = read_scalar(f.precision->clip_norm());
  const std::vector<std::vector<double>> masters = canonical_weights(f);
  f.forward_backward(62);
  const std::uint16_t inf_bits = 0x7c00;
  std::memcpy(f.model->parameters()[2]->grad.raw(), &inf_bits, sizeof inf_bits);
  f.step();
  BOOST_TEST(f.precision->scaler().snapshot().skipped_steps == 1);
  BOOST_TEST((canonical_weights(f) == masters));
  ClipTally tally = read_clip_tally(f.precision->clip_tally());
  BOOST_TEST(tally.finite_steps == 1);
  BOOST_TEST(tally.clipped_steps == 1);
  BOOST_TEST(tally.norm_sum == static_cast<double>(first_norm));
  f.forward_backward(63);
  f.step();
  tally = read_clip_tally(f.precision->clip_tally());
  BOOST_TEST(tally.finite_steps == 2);
  BOOST_TEST(tally.clipped_steps == 2);
  BOOST_TEST((canonical_weights(f) != masters));
}

// Without a dynamic scaler nothing skips the step: a NaN gradient gives a NaN norm and
// coefficient, which reach every weight, as with PyTorch's clip_grad_norm_ (documented).
BOOST_AUTO_TEST_CASE(o0_a_nan_gradient_gives_a_nan_coefficient) {
  Fixture f(OptLevel::O0);
  f.precision->set_clip_grad_norm(1.0f);
  f.forward_backward(71);
  f.model->parameters()[2]->grad.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  f.step();
  BOOST_TEST(std::isnan(read_scalar(f.precision->clip_coefficient())));
  for (nn::Parameter* p : f.precision->canonical_parameters())
    BOOST_TEST(std::isnan(p->value.to_floats()[0]), p->name);
  BOOST_TEST(read_clip_tally(f.precision->clip_tally()).finite_steps == 0);
}

BOOST_AUTO_TEST_CASE(clipping_off_and_bad_limits) {
  Fixture f(OptLevel::O0);
  BOOST_TEST(f.precision->clip_grad_norm() == 0.0f);
  BOOST_TEST(!f.precision->clip_coefficient().defined());
  f.precision->set_clip_grad_norm(0.5f);
  BOOST_TEST(f.precision->clip_tally().defined());
  f.precision->set_clip_grad_norm(0.0f);
  BOOST_TEST(!f.precision->clip_tally().defined());
  for (const float bad :
       {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    BOOST_CHECK_THROW(f.precision->set_clip_grad_norm(bad), UsageError);
  }
}

BOOST_AUTO_TEST_CASE(weight_averages_follow_each_applied_step_at_every_level) {
  constexpr float kDecay = 0.75f;
  for (const OptLevel level : {OptLevel::O0, OptLevel::O1, OptLevel::O2, OptLevel::O3}) {
    BOOST_TEST_CONTEXT(opt_level_name(level)) {
      Fixture f(level);
      f.precision->set_ema_decay(kDecay);
      const auto canonical = f.precision->canonical_parameters();
      std::vector<std::vector<float>> expected;
      for (nn::Parameter* p : canonical)
        expected.push_back(values(p->value));  // they start at the weights
      for (std::uint64_t step = 0; step < 3; ++step) {
        f.forward_backward(40 + step);
        f.step();
        for (std::size_t i = 0; i < canonical.size(); ++i)
          average_on_host(expected[i], values(canonical[i]->value), kDecay);
      }
      const std::vector<Tensor>& averages = f.precision->ema_parameters();
      BOOST_TEST_REQUIRE(averages.size() == canonical.size());
      for (std::size_t i = 0; i < canonical.size(); ++i) {
        BOOST_TEST((averages[i].dtype() == DType::f32), canonical[i]->name);
        BOOST_TEST(values(averages[i]) == expected[i], canonical[i]->name);
        // Three steps moved the weights: the average is neither the start nor the weights.
        BOOST_TEST(values(averages[i]) != values(canonical[i]->value), canonical[i]->name);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(warmed_up_averages_use_the_decay_of_the_step_count) {
  constexpr float kDecay = 0.99f;
  Fixture f(OptLevel::O2);
  f.precision->set_ema_decay(kDecay);
  f.precision->set_ema_warmup(true);
  const auto canonical = f.precision->canonical_parameters();
  std::vector<std::vector<float>> expected;
  for (nn::Parameter* p : canonical)
    expected.push_back(values(p->value));
  for (int step = 1; step <= 3; ++step) {
    f.forward_backward(80 + static_cast<std::uint64_t>(step));
    f.step();
    // Steps 1, 2, 3 applied: TensorFlow's (1 + n) / (10 + n), below 0.99.
    const float decay = (1.0f + static_cast<float>(step)) / (10.0f + static_cast<float>(step));
    for (std::size_t i = 0; i < canonical.size(); ++i)
      average_on_host(expected[i], values(canonical[i]->value), decay);
  }
  for (std::size_t i = 0; i < canonical.size(); ++i)
    BOOST_TEST(values(f.precision->ema_parameters()[i]) == expected[i], canonical[i]->name);
}

BOOST_AUTO_TEST_CASE(a_skipped_step_leaves_the_weight_averages) {
  Fixture f(OptLevel::O2);
  f.precision->set_ema_decay(0.5f);
  f.forward_backward(50);
  f.step();
  std::vector<std::vector<float>> before;
  for (const Tensor& average : f.precision->ema_parameters())
    before.push_back(values(average));
  f.forward_backward(51);
  const std::uint16_t inf_bits = 0x7c00;
  std::memcpy(f.model->parameters()[0]->grad.raw(), &inf_bits, sizeof inf_bits);
  f.precision->step();
  BOOST_TEST(f.precision->scaler().snapshot().skipped_steps == 1);
  for (std::size_t i = 0; i < before.size(); ++i)
    BOOST_TEST(values(f.precision->ema_parameters()[i]) == before[i]);
}

BOOST_AUTO_TEST_CASE(batch_norm_statistics_are_averaged_too) {
  Fixture f(OptLevel::O0, {}, "resnet18");
  constexpr float kDecay = 0.5f;
  f.precision->set_ema_decay(kDecay);
  const auto buffers = f.model->buffers();
  std::vector<std::vector<float>> expected;
  for (const nn::Buffer* b : buffers)
    expected.push_back(values(b->value));
  f.forward_backward(60);
  f.step();
  for (std::size_t i = 0; i < buffers.size(); ++i)
    average_on_host(expected[i], values(buffers[i]->value), kDecay);
  BOOST_TEST_REQUIRE(f.precision->ema_buffers().size() == buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i)
    BOOST_TEST(values(f.precision->ema_buffers()[i]) == expected[i], buffers[i]->name);
  // Named for checkpoints after what they follow: the parameters', then the buffers'.
  const auto state = f.precision->ema_state();
  BOOST_TEST_REQUIRE(state.size() == f.model->parameters().size() + buffers.size());
  BOOST_TEST(state.front().name == "ema." + f.model->parameters().front()->name);
  BOOST_TEST(state.back().name == "ema." + buffers.back()->name);
}

BOOST_AUTO_TEST_CASE(weight_averages_off_bad_decays_and_a_reset) {
  Fixture f(OptLevel::O0);
  BOOST_TEST(f.precision->ema_parameters().empty());
  BOOST_CHECK_THROW(f.precision->set_ema_decay(1.0f), UsageError);
  BOOST_CHECK_THROW(f.precision->set_ema_decay(-0.1f), UsageError);
  BOOST_CHECK_THROW(f.precision->set_ema_decay(std::nanf("")), UsageError);
  f.precision->set_ema_decay(0.9f);
  f.forward_backward(70);
  f.step();
  const nn::Parameter& first = *f.precision->canonical_parameters().front();
  BOOST_TEST(values(f.precision->ema_parameters().front()) != values(first.value));
  f.precision->reset_ema();
  BOOST_TEST(values(f.precision->ema_parameters().front()) == values(first.value));
  f.precision->set_ema_decay(0.0f);
  BOOST_TEST(f.precision->ema_parameters().empty());
  BOOST_TEST(f.precision->ema_state().empty());
}

BOOST_AUTO_TEST_SUITE_END()
