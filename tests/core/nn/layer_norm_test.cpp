// nn::LayerNorm: the module is the op (same bits forward and backward) at every opt level's
// dtypes, accumulates its gradients, keeps its parameters fp32 under keep_batchnorm_fp32,
// keeps activations only for a training backward, and recomputes to the same bits inside a
// recomputed Sequential child.
#include "core/nn/layer_norm.h"

#include <boost/test/unit_test.hpp>
#include <functional>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/nn/linear.h"
#include "core/nn/relu.h"
#include "core/nn/sequential.h"
#include "core/ops/elementwise.h"
#include "tests/core/nn/gradient_accumulation.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// Weight around 1 and bias around 0, not the initial ones and zeros, so a mixed-up parameter
// shows.
void randomize(nn::LayerNorm& ln, Generator& generator) {
  const Shape shape = ln.weight().value.shape();
  ln.weight().value.copy_from(random_tensor(shape, DType::f32, generator, 0.5f, 1.5f));
  ln.bias().value.copy_from(random_tensor(shape, DType::f32, generator));
}

std::int64_t activation_bytes() {
  return memory_stats(Device::cpu()).snapshot().current_of(MemoryCategory::activations);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layer_norm_module)

BOOST_AUTO_TEST_CASE(describes_itself_and_starts_at_the_identity) {
  nn::LayerNorm ln(256);
  BOOST_TEST(ln.type_name() == "LayerNorm");
  BOOST_TEST(ln.options() == "features=256, eps=1e-05");
  BOOST_TEST(nn::LayerNorm(4, 1e-3f).options() == "features=4, eps=0.001");
  const std::vector<nn::Parameter*> params = ln.parameters();
  BOOST_REQUIRE(params.size() == 2u);
  BOOST_TEST(params[0]->name == "weight");
  BOOST_TEST(params[1]->name == "bias");
  BOOST_TEST((params[0]->is_norm && params[1]->is_norm));
  BOOST_TEST(params[0]->value.to_floats() == std::vector<float>(256, 1.0f));
  BOOST_TEST(params[1]->value.to_floats() == std::vector<float>(256, 0.0f));
  BOOST_CHECK_THROW(nn::LayerNorm(0), Error);
  BOOST_CHECK_THROW(nn::LayerNorm(4, -1.0f), Error);
}

// At each level: parameter dtypes after the cast, output in the input's dtype (half in, half
// out with fp32 parameters), and forward, dx and both backwards' accumulated gradients the bits
// of the op called directly.
BOOST_AUTO_TEST_CASE(module_is_the_op_at_every_level) {
  for (const AccumulationLevel& level : kAccumulationLevels) {
    BOOST_TEST_CONTEXT(level.name) {
      const CastPolicyScope scope(level);
      Generator generator(11);
      const float eps = 1e-4f;
      nn::LayerNorm ln(19, eps);
      randomize(ln, generator);
      if (level.parameters != DType::f32)
        ln.cast_parameters(level.parameters, level.keep_norm_fp32);
      const DType param_dtype = level.keep_norm_fp32 ? DType::f32 : level.parameters;
      BOOST_TEST((ln.weight().value.dtype() == param_dtype));
      BOOST_TEST((ln.bias().value.dtype() == param_dtype));
      // O1 feeds it a half activation (a half linear's output).
      const DType input = level.cast_policy ? DType::f16 : level.input;
      const DType compute = param_dtype == DType::f32 ? input : param_dtype;
      ln.zero_grad();
      Tensor dweight = Tensor::zeros({19}, param_dtype);
      Tensor dbias = Tensor::zeros({19}, param_dtype);
      for (int step = 0; step < 2; ++step) {
        const Tensor x = random_tensor({2, 3, 19}, input, generator, -2.0f, 3.0f);
        // The second step's gradient comes from an fp32 op.
        const Tensor dy = random_tensor({2, 3, 19}, step == 0 ? input : DType::f32, generator);
        const Tensor y = ln.forward(x);
        BOOST_TEST((y.dtype() == compute));
        const Tensor x_op = cast(x, compute);
        const LayerNormResult expected =
            layer_norm_forward(x_op, ln.weight().value, ln.bias().value, eps);
        BOOST_TEST(same_bits(y, expected.y), "y, step " << step);
        const Tensor dx = ln.backward(dy);
        BOOST_TEST((dx.dtype() == input));
        const Tensor dx_op =
            layer_norm_backward(dy, x_op, ln.weight().value, expected.saved, dweight, dbias);
        BOOST_TEST(same_bits(dx, cast(dx_op, input)), "dx, step " << step);
      }
      // Accumulated over both backwards, as the op accumulated them.
      BOOST_TEST(same_bits(ln.weight().grad, dweight));
      BOOST_TEST(same_bits(ln.bias().grad, dbias));
      BOOST_TEST(ln.weight().grad.to_floats() != std::vector<float>(19, 0.0f));
    }
  }
}

BOOST_AUTO_TEST_CASE(keeps_activations_only_for_a_training_backward) {
  Generator generator(12);
  nn::LayerNorm ln(24);
  randomize(ln, generator);
  ln.zero_grad();
  const Tensor x = random_tensor({5, 24}, DType::f32, generator);
  const std::int64_t statistics = 2 * 5 * static_cast<std::int64_t>(sizeof(float));

  const std::int64_t before = activation_bytes();
  Tensor y = ln.forward(x);
  // The output, and the rows' mean and rstd (the input is the caller's, kept by reference).
  BOOST_TEST(activation_bytes() - before == static_cast<std::int64_t>(y.nbytes()) + statistics);
  ln.backward(random_tensor({5, 24}, DType::f32, generator));
  BOOST_TEST(activation_bytes() - before == static_cast<std::int64_t>(y.nbytes()));
  BOOST_CHECK_THROW(ln.backward(y), Error);  // released

  ln.set_training(false);
  const Tensor eval = ln.forward(x);
  BOOST_TEST(same_bits(eval, y), "evaluation computes what training does");
  BOOST_TEST(activation_bytes() - before == static_cast<std::int64_t>(2 * y.nbytes()));
  BOOST_CHECK_EXCEPTION(ln.backward(y), Error, [](const Error& error) {
    return std::string(error.what()).find("LayerNorm") != std::string::npos;
  });

  // A training forward marked to keep nothing (the first forward of a recomputed block).
  ln.set_training(true);
  ln.set_forward_mode(nn::ForwardMode{false, true});
  const Tensor discarded = ln.forward(x);
  BOOST_TEST(same_bits(discarded, y));
  BOOST_TEST(activation_bytes() - before == static_cast<std::int64_t>(3 * y.nbytes()));
  BOOST_CHECK_THROW(ln.backward(y), Error);
}

// Linear, then a Sequential child (LayerNorm, ReLU, Linear, LayerNorm), then Linear; the child
// recomputed or not: two steps' outputs, input gradients and accumulated parameter gradients
// are the same bits at every level.
BOOST_AUTO_TEST_CASE(recomputed_child_changes_no_bit) {
  const auto run = [](const AccumulationLevel& level, bool recompute) {
    const CastPolicyScope scope(level);
    Generator generator(13);
    nn::Sequential net;
    net.emplace<nn::Linear>(8, 16);
    auto& child = net.emplace<nn::Sequential>();
    child.emplace<nn::LayerNorm>(16);
    child.emplace<nn::ReLU>();
    child.emplace<nn::Linear>(16, 16);
    child.emplace<nn::LayerNorm>(16);
    net.emplace<nn::Linear>(16, 4);
    for (nn::Parameter* param : net.parameters()) {
      const bool norm_weight = param->is_norm && param->name.find("weight") != std::string::npos;
      const float centre = norm_weight ? 1.0f : 0.0f;
      param->value.copy_from(
          random_tensor(param->value.shape(), DType::f32, generator, centre - 0.5f, centre + 0.5f));
    }
    if (level.parameters != DType::f32) net.cast_parameters(level.parameters, level.keep_norm_fp32);
    net.set_recompute(1, recompute);
    net.zero_grad();
    std::vector<std::vector<float>> results;
    for (int step = 0; step < 2; ++step) {
      const Tensor x = random_tensor({6, 8}, level.input, generator);
      const Tensor y = net.forward(x);
      results.push_back(y.to_floats());
      results.push_back(net.backward(random_tensor(y.shape(), y.dtype(), generator)).to_floats());
    }
    for (const nn::Parameter* param : net.parameters())
      results.push_back(param->grad.to_floats());
    return results;
  };
  for (const AccumulationLevel& level : kAccumulationLevels) {
    const auto kept = run(level, false);
    const auto recomputed = run(level, true);
    BOOST_REQUIRE(kept.size() == recomputed.size());
    for (std::size_t i = 0; i < kept.size(); ++i)
      BOOST_TEST(recomputed[i] == kept[i], level.name << ": result " << i);
  }
}

BOOST_AUTO_TEST_SUITE_END()
