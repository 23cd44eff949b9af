// The Module base: qualified names and order, gradient allocation, dtype casts, the
// grad-ready hook, training mode, descriptions, and that activations do not outlive a step.
#include "core/nn/module.h"

#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <memory>
#include <string>
#include <vector>

#include "core/nn/batch_norm2d.h"
#include "core/nn/conv2d.h"
#include "core/nn/flatten.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/relu.h"
#include "core/nn/residual_block.h"
#include "core/nn/sequential.h"
#include "tests/support/gradcheck.h"

using namespace alloy;

namespace {

std::vector<std::string> names_of(const std::vector<nn::Parameter*>& params) {
  std::vector<std::string> names;
  for (const nn::Parameter* p : params)
    names.push_back(p->name);
  return names;
}

// A module with a parameter of its own and a child, to pin "own parameters first".
class Scaled : public nn::Module {
 public:
  Scaled() {
    register_parameter("scale",
                       Tensor::zeros({1}, DType::f32, Device::cpu(), MemoryCategory::parameters));
    register_module("inner", std::make_unique<nn::Linear>(2, 2));
  }
  Tensor forward(const Tensor& x) override { return x; }
  Tensor backward(const Tensor& dy) override { return dy; }
  std::string type_name() const override { return "Scaled"; }
  void register_activation_tensor() { register_parameter("bad", Tensor::zeros({1}, DType::f32)); }
};

// conv -> bn -> relu -> maxpool -> residual block -> avgpool -> flatten -> linear: every
// layer kind, on [2, 2, 8, 8] inputs.
std::unique_ptr<nn::Sequential> every_layer_net(Generator& generator) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(2, 4, 3, 1, 1);
  net->emplace<nn::BatchNorm2d>(4);
  net->emplace<nn::ReLU>();
  net->emplace<nn::MaxPool2d>(2);            // 8 -> 4
  net->emplace<nn::ResidualBlock>(4, 6, 2);  // 4 -> 2
  net->emplace<nn::AvgPool2d>(2);            // 2 -> 1
  net->emplace<nn::Flatten>();
  net->emplace<nn::Linear>(6, 3);
  for (nn::Parameter* p : net->parameters()) {
    if (!p->is_norm)
      p->value.copy_from(test::random_tensor(p->value.shape(), DType::f32, generator, -0.5f, 0.5f));
  }
  return net;
}

std::int64_t activation_bytes() {
  return memory_stats(Device::cpu()).snapshot().current_of(MemoryCategory::activations);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_module)

BOOST_AUTO_TEST_CASE(parameters_are_qualified_and_in_registration_order) {
  nn::Sequential root;
  root.emplace<nn::Linear>(3, 4);
  root.emplace<nn::ReLU>();
  auto features = std::make_unique<nn::Sequential>();
  features->emplace<nn::Conv2d>(1, 2, 3);
  features->emplace<nn::ReLU>();
  features->emplace<nn::Linear>(4, 5, /*bias=*/false);
  features->emplace<nn::BatchNorm2d>(5);
  root.add("features", std::move(features));
  root.add("scaled", std::make_unique<Scaled>());

  const std::vector<std::string> expected = {"0.weight",
                                             "0.bias",
                                             "features.0.weight",
                                             "features.0.bias",
                                             "features.2.weight",
                                             "features.3.weight",
                                             "features.3.bias",
                                             "scaled.scale",
                                             "scaled.inner.weight",
                                             "scaled.inner.bias"};
  BOOST_TEST(names_of(root.parameters()) == expected, boost::test_tools::per_element());

  std::vector<std::string> buffers;
  for (const nn::Buffer* b : root.buffers())
    buffers.push_back(b->name);
  const std::vector<std::string> expected_buffers = {"features.3.running_mean",
                                                     "features.3.running_var"};
  BOOST_TEST(buffers == expected_buffers, boost::test_tools::per_element());

  for (const nn::Parameter* p : root.parameters()) {
    BOOST_TEST((p->value.category() == MemoryCategory::parameters), p->name);
    BOOST_TEST(p->is_norm == (p->name.rfind("features.3.", 0) == 0), p->name);
  }
}

BOOST_AUTO_TEST_CASE(residual_block_names_follow_torchvision) {
  nn::Sequential layer;
  layer.emplace<nn::ResidualBlock>(2, 4, 2);
  layer.emplace<nn::ResidualBlock>(4, 4, 1);
  const std::vector<std::string> expected = {
      "0.conv1.weight",    "0.bn1.weight",   "0.bn1.bias",          "0.conv2.weight",
      "0.bn2.weight",      "0.bn2.bias",     "0.shortcut.0.weight", "0.shortcut.1.weight",
      "0.shortcut.1.bias", "1.conv1.weight", "1.bn1.weight",        "1.bn1.bias",
      "1.conv2.weight",    "1.bn2.weight",   "1.bn2.bias"};
  BOOST_TEST(names_of(layer.parameters()) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(parameters_must_be_allocated_as_parameters) {
  Scaled module;
  BOOST_CHECK_EXCEPTION(module.register_activation_tensor(), Error, [](const Error& e) {
    return std::string(e.what()).find("Scaled: parameter 'bad'") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(zero_grad_allocates_lazily_then_zeroes_in_place) {
  Generator generator(1);
  auto net = every_layer_net(generator);
  for (const nn::Parameter* p : net->parameters())
    BOOST_TEST(!p->grad.defined(), p->name);

  net->zero_grad();
  std::vector<const void*> storage;
  for (nn::Parameter* p : net->parameters()) {
    BOOST_TEST_REQUIRE(p->grad.defined(), p->name);
    BOOST_TEST((p->grad.shape() == p->value.shape()), p->name);
    BOOST_TEST((p->grad.dtype() == p->value.dtype()), p->name);
    BOOST_TEST((p->grad.category() == MemoryCategory::gradients), p->name);
    const auto values = p->grad.to_floats();
    BOOST_TEST(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }));
    p->grad.fill(3.0f);
    storage.push_back(p->grad.raw());
  }

  net->zero_grad();
  std::size_t index = 0;
  for (nn::Parameter* p : net->parameters()) {
    BOOST_TEST(p->grad.raw() == storage[index++], p->name << " reallocated");
    const auto values = p->grad.to_floats();
    BOOST_TEST(std::all_of(values.begin(), values.end(), [](float v) { return v == 0.0f; }),
               p->name);
  }
}

BOOST_AUTO_TEST_CASE(cast_parameters_converts_values_grads_and_buffers) {
  for (const DType half : {DType::f16, DType::bf16}) {
    for (const bool keep_norm_fp32 : {true, false}) {
      Generator generator(2);
      auto net = every_layer_net(generator);
      net->zero_grad();
      std::vector<std::vector<float>> before;
      for (nn::Parameter* p : net->parameters()) {
        p->grad.fill(0.1f);
        before.push_back(p->value.to_floats());
      }

      net->cast_parameters(half, keep_norm_fp32);
      std::size_t index = 0;
      for (nn::Parameter* p : net->parameters()) {
        const DType expected = p->is_norm && keep_norm_fp32 ? DType::f32 : half;
        BOOST_TEST((p->value.dtype() == expected), p->name << " is " << p->value.str());
        BOOST_TEST((p->value.category() == MemoryCategory::parameters), p->name);
        BOOST_TEST((p->grad.dtype() == expected), p->name << " grad is " << p->grad.str());
        BOOST_TEST((p->grad.category() == MemoryCategory::gradients), p->name);
        // Values are rounded once from their fp32 originals.
        const Tensor rounded = Tensor::from_floats(p->value.shape(), before[index++], expected);
        BOOST_TEST(p->value.to_floats() == rounded.to_floats(), boost::test_tools::per_element());
        const Tensor grad_rounded = Tensor::from_floats(
            p->grad.shape(), std::vector<float>(p->grad.numel(), 0.1f), expected);
        BOOST_TEST(p->grad.to_floats() == grad_rounded.to_floats(),
                   boost::test_tools::per_element());
      }
      for (const nn::Buffer* b : net->buffers()) {
        BOOST_TEST((b->value.dtype() == (keep_norm_fp32 ? DType::f32 : half)), b->name);
        BOOST_TEST((b->value.category() == MemoryCategory::parameters), b->name);
      }

      // The cast model still runs, in its parameters' dtype.
      Tensor x = test::random_tensor({2, 2, 8, 8}, half, generator);
      const Tensor y = net->forward(x);
      BOOST_TEST((y.dtype() == half));
      BOOST_TEST((y.shape() == Shape{2, 3}));

      net->cast_parameters(DType::f32, false);
      for (nn::Parameter* p : net->parameters())
        BOOST_TEST((p->value.dtype() == DType::f32));
    }
  }
}

BOOST_AUTO_TEST_CASE(grad_ready_hook_fires_in_reverse_order_with_final_gradients) {
  Generator generator(3);
  auto net = every_layer_net(generator);
  std::vector<std::string> order;
  std::vector<std::vector<float>> seen;
  net->set_grad_ready_hook([&](nn::Parameter& p) {
    order.push_back(p.name);
    seen.push_back(p.grad.to_floats());
  });
  net->zero_grad();
  const Tensor x = test::random_tensor({2, 2, 8, 8}, DType::f32, generator);
  const Tensor y = net->forward(x);
  net->backward(test::random_tensor(y.shape(), DType::f32, generator));

  const auto params = net->parameters();
  std::vector<std::string> reversed = names_of(params);
  std::reverse(reversed.begin(), reversed.end());
  BOOST_TEST(order == reversed, boost::test_tools::per_element());
  // Each gradient was already final when its parameter was reported.
  for (std::size_t i = 0; i < order.size(); ++i) {
    const nn::Parameter& p = *params[params.size() - 1 - i];
    BOOST_TEST(seen[i] == p.grad.to_floats(), p.name);
    const auto& values = seen[i];
    BOOST_TEST(std::any_of(values.begin(), values.end(), [](float v) { return v != 0.0f; }),
               p.name << " was reported before its gradient was computed");
  }
}

BOOST_AUTO_TEST_CASE(set_training_reaches_every_descendant) {
  Generator generator(4);
  auto net = every_layer_net(generator);
  net->set_training(false);
  BOOST_TEST(!net->training());
  for (std::size_t i = 0; i < net->size(); ++i)
    BOOST_TEST(!(*net)[i].training(), i);
  net->set_training(true);
  for (std::size_t i = 0; i < net->size(); ++i)
    BOOST_TEST((*net)[i].training(), i);
}

BOOST_AUTO_TEST_CASE(describe_has_one_line_per_module_with_shapes) {
  nn::Sequential net;
  net.emplace<nn::Conv2d>(1, 20, 3);
  net.emplace<nn::AvgPool2d>(2);
  net.emplace<nn::ResidualBlock>(20, 20, 1);
  const std::string text = net.describe();
  BOOST_TEST_MESSAGE(text);
  // Root, conv, pool, the block and its four layers.
  BOOST_TEST(std::count(text.begin(), text.end(), '\n') == 8);
  BOOST_TEST(text.find("Sequential()\n") == 0u);
  BOOST_TEST(
      text.find("0 Conv2d(kernel=3, stride=1, padding=0) weight=[20, 1, 3, 3] bias=[20]\n") !=
      std::string::npos);
  BOOST_TEST(text.find("1 AvgPool2d(kernel=2, stride=2, padding=0)\n") != std::string::npos);
  BOOST_TEST(text.find("2.bn2 BatchNorm2d(momentum=0.1, eps=1e-05) weight=[20] bias=[20]\n") !=
             std::string::npos);
  // Dtypes are not part of the description: a model cast to half is the same model.
  net.cast_parameters(DType::f16, true);
  BOOST_TEST(net.describe() == text);
}

BOOST_AUTO_TEST_CASE(first_layer_skips_the_input_gradient_when_told) {
  Generator generator(5);
  auto net = every_layer_net(generator);
  net->zero_grad();
  const Tensor x = test::random_tensor({2, 2, 8, 8}, DType::f32, generator);
  Tensor y = net->forward(x);
  const Tensor dy = test::random_tensor(y.shape(), DType::f32, generator);
  const Tensor dx = net->backward(dy);
  BOOST_TEST_REQUIRE(dx.defined());
  BOOST_TEST((dx.shape() == x.shape()));

  const auto first_grad = net->parameters().front()->grad.to_floats();
  net->zero_grad();
  net->set_needs_input_grad(false);
  y = net->forward(x);
  BOOST_TEST(!net->backward(dy).defined());
  // Parameter gradients do not depend on it.
  BOOST_TEST(net->parameters().front()->grad.to_floats() == first_grad,
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(activations_are_released_after_backward) {
  Generator generator(6);
  auto net = every_layer_net(generator);
  net->zero_grad();
  const Tensor x = test::random_tensor({2, 2, 8, 8}, DType::f32, generator);
  const Tensor dy = test::random_tensor({2, 3}, DType::f32, generator);
  const std::int64_t baseline = activation_bytes();
  for (int step = 0; step < 2; ++step) {
    {
      const Tensor y = net->forward(x);
      BOOST_TEST(activation_bytes() > baseline);
      net->backward(dy);
    }
    BOOST_TEST(activation_bytes() == baseline, "step " << step);
  }

  // Evaluation keeps nothing past the output, and has no backward.
  net->set_training(false);
  {
    const Tensor y = net->forward(x);
    BOOST_TEST(activation_bytes() == baseline + static_cast<std::int64_t>(y.nbytes()));
  }
  BOOST_TEST(activation_bytes() == baseline);
  BOOST_CHECK_THROW(net->backward(dy), Error);
}

BOOST_AUTO_TEST_SUITE_END()
