// GPT: the presets' sizes (GPT-2 small's 124,439,808 parameters with the tied head), the
// initialisation, configuration errors, and the whole model's gradient (embedding, blocks,
// tied head and loss) against central differences of its loss.
#include "core/models/gpt.h"

#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "core/nn/dropout.h"
#include "core/ops/step_tally.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::models;
using namespace alloy::test;

namespace {

std::int64_t parameter_count(nn::Module& model) {
  std::int64_t count = 0;
  for (const nn::Parameter* param : model.parameters())
    count += param->value.numel();
  return count;
}

Tensor random_tokens(const Shape& shape, int vocab, Generator& generator) {
  Tensor tokens = Tensor::empty(shape, DType::i32);
  for (std::int64_t i = 0; i < tokens.numel(); ++i)
    tokens.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(generator.below(static_cast<std::uint64_t>(vocab)));
  return tokens;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpt)

BOOST_AUTO_TEST_CASE(gpt2_has_124439808_parameters_with_the_tied_head) {
  Generator generator(1);
  const GptConfig config = gpt_preset("gpt2");
  const auto model = make_gpt(config, generator);
  BOOST_TEST(parameter_count(*model) == 124439808);
}

BOOST_AUTO_TEST_CASE(presets_and_configuration_errors) {
  const GptConfig shakespeare = gpt_preset("gpt-shakespeare");
  BOOST_TEST(shakespeare.n_layer == 6);
  BOOST_TEST(shakespeare.n_head == 6);
  BOOST_TEST(shakespeare.n_embd == 384);
  BOOST_TEST(shakespeare.block_size == 256);
  BOOST_TEST(shakespeare.dropout == 0.2f);
  BOOST_TEST(!shakespeare.bias);
  BOOST_TEST(is_gpt_model("gpt"));
  BOOST_TEST(!is_gpt_model("lenet"));
  GptConfig bad;
  bad.n_embd = 100;
  bad.n_head = 3;
  BOOST_CHECK_THROW(check_gpt_config(bad), UsageError);
  bad = GptConfig{};
  bad.dropout = 1.0f;
  BOOST_CHECK_THROW(check_gpt_config(bad), UsageError);
}

// Without bias: no bias parameters at all, layer norms included. Weights follow nanoGPT's
// initialisation: std 0.02, the residual projections 0.02 / sqrt(2 n_layer).
BOOST_AUTO_TEST_CASE(bias_false_and_initialisation) {
  Generator generator(2);
  GptConfig config;
  config.n_layer = 3;
  config.n_head = 2;
  config.n_embd = 64;
  config.block_size = 32;
  config.vocab_size = 300;
  config.bias = false;
  const auto model = make_gpt(config, generator);
  const std::int64_t c = 64;
  BOOST_TEST(parameter_count(*model) ==
             300 * c + 32 * c + 3 * (2 * c + 3 * c * c + c * c + 4 * c * c + 4 * c * c) + c);
  for (nn::Parameter* param : model->parameters()) {
    BOOST_TEST(param->name.find("bias") == std::string::npos, param->name);
    if (param->value.ndim() != 2) continue;
    const std::vector<float> values = param->value.to_floats();
    double squares = 0.0;
    for (const float v : values)
      squares += static_cast<double>(v) * v;
    const double std = std::sqrt(squares / static_cast<double>(values.size()));
    const bool projection = param->name.find("c_proj.weight") != std::string::npos;
    const double expected = projection ? 0.02 / std::sqrt(6.0) : 0.02;
    BOOST_TEST(std == expected, param->name << boost::test_tools::tolerance(0.1));
  }
}

// With dropout (embedding, attention probabilities, residual branches) the masks are those of
// the step count in scope, the same for every evaluation of the loss.
BOOST_DATA_TEST_CASE(gradients_match_central_differences_of_the_loss,
                     boost::unit_test::data::make({0.0f, 0.25f}), dropout) {
  set_cpu_threads(1);
  Generator generator(3);
  GptConfig config;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 8;
  config.block_size = 6;
  config.vocab_size = 7;
  config.dropout = dropout;
  const auto model = make_gpt(config, generator);
  Tensor step = Tensor::zeros({2}, DType::i32);
  step.data<std::int32_t>()[0] = 3;
  const nn::DropoutStreamScope stream({&step, 0, 1});
  // Larger weights than the initialisation, so every part of the model matters to the loss.
  for (nn::Parameter* param : model->parameters())
    param->value.copy_from(random_tensor(param->value.shape(), DType::f32, generator, -0.5f, 0.5f));
  const Tensor tokens = random_tokens({2, 5}, config.vocab_size, generator);
  const Tensor targets = random_tokens({2, 5}, config.vocab_size, generator);
  const Tensor one = Tensor::from_floats({1}, {1.0f});
  const auto loss = [&] {
    // A training forward without keeping activations: dropout as in the step.
    model->set_forward_mode({false, true});
    Tensor tally = make_step_tally(Device::cpu());
    model->loss(model->forward(tokens), targets, tally);
    model->set_forward_mode({});
    return read_step_tally(tally).loss_sum / 10.0;
  };
  model->zero_grad();
  Tensor tally = make_step_tally(Device::cpu());
  const Tensor h = model->forward(tokens);
  model->backward(model->loss_step(h, targets, one, tally));
  BOOST_TEST(read_step_tally(tally).loss_sum / 10.0 == loss(), boost::test_tools::tolerance(1e-6));
  for (nn::Parameter* param : model->parameters()) {
    const std::vector<double> numerical = numerical_gradient(loss, param->value, 1e-2f);
    check_close(param->grad, numerical, 2e-2, 2e-4, param->name);
  }
}

BOOST_AUTO_TEST_SUITE_END()
