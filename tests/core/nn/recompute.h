// Activation recomputation (nn::Sequential::set_recompute, Module::recompute_blocks): a network
// whose blocks run their forward again in backward gives the same output, input gradient,
// parameter gradients and batch-norm running statistics, bit for bit, as the same network
// keeping its activations, at every opt level's dtypes; it holds fewer activation bytes
// between forward and backward when its blocks are recomputed; nested recomputation (a recomputed
// Sequential holding recomputed blocks) still counts each batch once in the running statistics.
// Shared by the CPU test and its GPU twin, and by nn::Residual's (on networks of their own).
// With dropout, layers inside and outside the recomputed children draw the same masks again when
// recomputed (the masks are functions of the step's stream, never stored).
#pragma once

#include <boost/test/unit_test.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/nn/dropout.h"
#include "core/nn/gelu.h"
#include "core/nn/residual.h"
#include "core/nn/sequential.h"
#include "tests/core/nn/gradient_accumulation.h"

namespace alloy::test {

// conv 1->8 stride 2 + batch norm + relu; a residual block; a downsampling one; a Sequential
// holding a third block (index 4); average pool, linear. [N, 1, 14, 14] in, 7 -> 4 inside.
// With dropout > 0, the inner Sequential ends with a Dropout and another precedes the linear.
inline std::unique_ptr<nn::Sequential> make_recompute_net(Generator& generator,
                                                          float dropout = 0.0f) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(1, 8, 3, 2, 1, false);
  net->emplace<nn::BatchNorm2d>(8, 0.1f, 1e-5f, /*fuse_relu=*/true);
  net->emplace<nn::ResidualBlock>(8, 8, 1);
  net->emplace<nn::ResidualBlock>(8, 16, 2);
  auto& inner = net->emplace<nn::Sequential>();
  inner.emplace<nn::ResidualBlock>(16, 16, 1);
  if (dropout > 0.0f) inner.emplace<nn::Dropout>(dropout, generator);
  net->emplace<nn::AvgPool2d>(4);
  net->emplace<nn::Flatten>();
  if (dropout > 0.0f) net->emplace<nn::Dropout>(dropout, generator);
  net->emplace<nn::Linear>(16, 10);
  for (nn::Parameter* param : net->parameters()) {
    if (!param->is_norm) models::init_normal(param->value, 0.3, generator);
  }
  return net;
}

// A network for the checks below: how to build it, its input's shape (the batch first) and
// how many blocks recompute_blocks marks in it.
struct RecomputeNet {
  std::function<std::unique_ptr<nn::Sequential>(Generator&)> make;
  Shape input;
  int blocks;
};
inline RecomputeNet conv_recompute_net(float dropout = 0.0f) {
  // Two blocks here, one in the inner Sequential.
  return {[dropout](Generator& generator) { return make_recompute_net(generator, dropout); },
          {6, 1, 14, 14},
          3};
}

// A transformer's feed-forward sublayers: linear 8->16; two residual blocks
// x + linear(gelu(linear(x))) (16->32->16, GELU exact then tanh); a Sequential holding a third;
// linear 16->10. [N, 8] in.
inline std::unique_ptr<nn::Sequential> make_residual_mlp(Generator& generator) {
  const auto block = [](GeluApproximation approximation) {
    auto body = std::make_unique<nn::Sequential>();
    body->emplace<nn::Linear>(16, 32);
    body->emplace<nn::GELU>(approximation);
    body->emplace<nn::Linear>(32, 16);
    return std::make_unique<nn::Residual>(std::move(body));
  };
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Linear>(8, 16);
  net->add(block(GeluApproximation::none));
  net->add(block(GeluApproximation::tanh));
  net->emplace<nn::Sequential>().add(block(GeluApproximation::none));
  net->emplace<nn::Linear>(16, 10);
  for (nn::Parameter* param : net->parameters())
    models::init_normal(param->value, 0.3, generator);
  return net;
}
inline RecomputeNet residual_recompute_net() {
  return {make_residual_mlp, {6, 8}, 3};
}

// What two training steps (forward, backward, no update) leave: each step's output and input
// gradient, then every parameter gradient (accumulated over both) and buffer, as host floats.
struct RecomputeRun {
  std::vector<std::vector<float>> results;
  std::int64_t activations_after_forward = 0;  // bytes held between the first forward and backward
};

template <class Place>
RecomputeRun run_recompute_net(const RecomputeNet& model, const AccumulationLevel& level,
                               Device device, const Place& place,
                               const std::function<void(nn::Sequential&)>& configure) {
  const CastPolicyScope scope(level);
  Generator generator(31);
  std::unique_ptr<nn::Sequential> net = model.make(generator);
  if (level.parameters != DType::f32) net->cast_parameters(level.parameters, level.keep_norm_fp32);
  net->to_device(device);
  net->set_training(true);
  configure(*net);
  net->zero_grad();
  RecomputeRun run;
  for (std::uint64_t step = 0; step < 2; ++step) {
    Generator data(100 + step);
    const Tensor images = place(random_tensor(model.input, level.input, data));
    // Each step's masks: the step count 40 + step, rows from 2 (as a later micro-batch's).
    const Tensor step_count =
        place(Tensor::from_floats({2}, {static_cast<float>(40 + step), 0.0f}, DType::i32));
    const nn::DropoutStreamScope stream({&step_count, 2, 1});
    const std::int64_t before =
        memory_stats(device).snapshot().current_of(MemoryCategory::activations);
    Tensor logits = net->forward(images);
    if (step == 0) {
      run.activations_after_forward =
          memory_stats(device).snapshot().current_of(MemoryCategory::activations) - before;
    }
    const Tensor dy = place(random_tensor(logits.shape(), logits.dtype(), data, -0.5f, 0.5f));
    run.results.push_back(logits.to_floats());
    logits = Tensor();
    run.results.push_back(net->backward(dy).to_floats());
  }
  for (const nn::Parameter* param : net->parameters())
    run.results.push_back(param->grad.to_floats());
  for (const nn::Buffer* buffer : net->buffers())
    run.results.push_back(buffer->value.to_floats());
  return run;
}

template <class Place>
void check_recompute_changes_no_bit(const AccumulationLevel& level, Device device,
                                    const Place& place,
                                    const RecomputeNet& model = conv_recompute_net()) {
  BOOST_TEST_CONTEXT(level.name << " on " << device.str()) {
    const RecomputeRun kept =
        run_recompute_net(model, level, device, place, [](nn::Sequential&) {});
    const RecomputeRun blocks = run_recompute_net(
        model, level, device, place,
        [&](nn::Sequential& net) { BOOST_TEST(net.recompute_blocks(true) == model.blocks); });
    // Every child recomputed, the inner Sequential too: its block is recomputed inside a
    // recomputation, whose batch norm must still update the running statistics once.
    const RecomputeRun nested =
        run_recompute_net(model, level, device, place, [](nn::Sequential& net) {
          net.recompute_blocks(true);
          for (std::size_t i = 0; i < net.size(); ++i)
            net.set_recompute(i, true);
        });
    BOOST_REQUIRE(blocks.results.size() == kept.results.size());
    BOOST_REQUIRE(nested.results.size() == kept.results.size());
    for (std::size_t i = 0; i < kept.results.size(); ++i) {
      BOOST_TEST(blocks.results[i] == kept.results[i], "blocks: result " << i);
      BOOST_TEST(nested.results[i] == kept.results[i], "nested: result " << i);
    }
    BOOST_TEST_MESSAGE(level.name << ": activation bytes between forward and backward "
                                  << kept.activations_after_forward << " kept, "
                                  << blocks.activations_after_forward << " with blocks recomputed, "
                                  << nested.activations_after_forward << " nested");
    BOOST_TEST(blocks.activations_after_forward < kept.activations_after_forward * 3 / 4);
  }
}

}  // namespace alloy::test
