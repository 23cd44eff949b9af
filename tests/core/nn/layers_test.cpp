// Each layer's backward against central differences of sum(y * w) for random w, in fp32, and
// the layers' modes and dtype handling.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/memory.h"
#include "core/nn/batch_norm2d.h"
#include "core/nn/conv2d.h"
#include "core/nn/flatten.h"
#include "core/nn/gelu.h"
#include "core/nn/linear.h"
#include "core/nn/pool2d.h"
#include "core/nn/relu.h"
#include "core/nn/residual.h"
#include "core/nn/residual_block.h"
#include "core/nn/sequential.h"
#include "tests/support/gradcheck.h"

using namespace alloy;

namespace {

struct Tolerance {
  float step = 1e-2f;
  double rtol = 1e-2;
  double atol = 1e-3;
};

void randomize_parameters(nn::Module& module, Generator& generator) {
  for (nn::Parameter* p : module.parameters()) {
    // Norm weights near 1 keep batch norm well conditioned; everything else around 0.
    const float centre = p->is_norm && p->name.find("weight") != std::string::npos ? 1.0f : 0.0f;
    p->value.copy_from(
        test::random_tensor(p->value.shape(), DType::f32, generator, centre - 0.5f, centre + 0.5f));
  }
}

// Backward of `module` at x against central differences, for the input and every parameter.
void check_gradients(nn::Module& module, Tensor x, Generator& generator, const Tolerance& tol) {
  const Shape y_shape = module.forward(x).shape();
  const Tensor dy = test::random_tensor(y_shape, DType::f32, generator);
  const std::vector<double> weights = test::to_doubles(dy);

  module.zero_grad();
  module.forward(x);
  const Tensor dx = module.backward(dy);
  BOOST_TEST_REQUIRE(dx.defined());
  BOOST_TEST_REQUIRE((dx.shape() == x.shape()));
  const auto analytic_dx = test::to_doubles(dx);
  std::vector<std::vector<double>> analytic_grads;
  for (const nn::Parameter* p : module.parameters()) {
    analytic_grads.push_back(test::to_doubles(p->grad));
  }

  const auto loss = [&] { return test::weighted_sum(module.forward(x), weights); };
  test::check_close(analytic_dx, test::numerical_gradient(loss, x, tol.step), tol.rtol, tol.atol,
                    module.type_name() + " dx");
  std::size_t index = 0;
  for (nn::Parameter* p : module.parameters()) {
    test::check_close(analytic_grads[index++], test::numerical_gradient(loss, p->value, tol.step),
                      tol.rtol, tol.atol, module.type_name() + " d" + p->name);
  }
}

// Values spaced at least 2 / count apart in [-1, 1], shuffled: no two elements of a pooling
// window come within a finite-difference step of each other.
Tensor distinct_values(const Shape& shape, Generator& generator) {
  const auto count = static_cast<std::size_t>(shape_numel(shape));
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), 0u);
  for (std::size_t i = count - 1; i > 0; --i)
    std::swap(order[i], order[generator.below(i + 1)]);
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = -1.0f + 2.0f * static_cast<float>(order[i]) / static_cast<float>(count);
  }
  return Tensor::from_floats(shape, values);
}

// Uniform in +-[0.05, 1]: no element within a finite-difference step of relu's kink.
Tensor away_from_zero(const Shape& shape, Generator& generator) {
  Tensor x = test::random_tensor(shape, DType::f32, generator);
  auto values = x.to_floats();
  for (auto& v : values)
    v = std::copysign(0.05f + 0.95f * std::fabs(v), v);
  x.copy_from_floats(values);
  return x;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_layers)

BOOST_AUTO_TEST_CASE(linear_gradients) {
  for (const bool bias : {true, false}) {
    Generator generator(10);
    nn::Linear linear(5, 3, bias);
    randomize_parameters(linear, generator);
    BOOST_TEST(linear.parameters().size() == (bias ? 2u : 1u));
    check_gradients(linear, test::random_tensor({4, 5}, DType::f32, generator), generator, {});
  }
}

BOOST_AUTO_TEST_CASE(conv2d_gradients) {
  struct Case {
    int kernel, stride, padding;
    bool bias;
  };
  for (const Case c : {Case{3, 1, 0, true}, Case{3, 2, 1, false}, Case{1, 2, 0, true}}) {
    Generator generator(11);
    nn::Conv2d conv(2, 3, c.kernel, c.stride, c.padding, c.bias);
    randomize_parameters(conv, generator);
    check_gradients(conv, test::random_tensor({2, 2, 5, 5}, DType::f32, generator), generator, {});
  }
}

BOOST_AUTO_TEST_CASE(pooling_gradients) {
  Generator generator(12);
  nn::AvgPool2d avg(2);
  check_gradients(avg, test::random_tensor({2, 3, 6, 6}, DType::f32, generator), generator, {});
  nn::AvgPool2d avg_padded(3, 2, 1);
  check_gradients(avg_padded, test::random_tensor({2, 3, 5, 5}, DType::f32, generator), generator,
                  {});
  const Tolerance fine{1e-3f, 1e-2, 1e-3};
  nn::MaxPool2d max(2);
  check_gradients(max, distinct_values({2, 3, 6, 6}, generator), generator, fine);
  nn::MaxPool2d max_overlapping(3, 2, 1);
  check_gradients(max_overlapping, distinct_values({2, 3, 5, 5}, generator), generator, fine);
}

BOOST_AUTO_TEST_CASE(relu_and_flatten_gradients) {
  Generator generator(13);
  nn::ReLU relu;
  check_gradients(relu, away_from_zero({3, 4, 2, 2}, generator), generator, {1e-3f, 1e-2, 1e-3});
  nn::Flatten flatten;
  const Tensor x = test::random_tensor({3, 2, 2, 2}, DType::f32, generator);
  BOOST_TEST((flatten.forward(x).shape() == Shape{3, 8}));
  check_gradients(flatten, x, generator, {});
}

BOOST_AUTO_TEST_CASE(gelu_gradients) {
  for (const GeluApproximation approximation : {GeluApproximation::none, GeluApproximation::tanh}) {
    Generator generator(18);
    nn::GELU gelu(approximation);
    check_gradients(gelu, test::random_tensor({3, 4, 5}, DType::f32, generator, -3.0f, 3.0f),
                    generator, {});
  }
}

BOOST_AUTO_TEST_CASE(residual_gradients) {
  Generator generator(19);
  auto body = std::make_unique<nn::Sequential>();
  body->emplace<nn::Linear>(6, 8);
  body->emplace<nn::GELU>();
  body->emplace<nn::Linear>(8, 6);
  nn::Residual residual(std::move(body));
  randomize_parameters(residual, generator);
  check_gradients(residual, test::random_tensor({3, 6}, DType::f32, generator), generator, {});
}

BOOST_AUTO_TEST_CASE(batch_norm_training_gradients) {
  Generator generator(14);
  nn::BatchNorm2d bn(3);
  randomize_parameters(bn, generator);
  check_gradients(bn, test::random_tensor({4, 3, 3, 3}, DType::f32, generator, -2.0f, 2.0f),
                  generator, {1e-3f, 2e-2, 2e-3});
}

BOOST_AUTO_TEST_CASE(sequential_gradients) {
  Generator generator(15);
  nn::Sequential net;
  net.emplace<nn::Conv2d>(2, 3, 3, 1, 1);
  net.emplace<nn::AvgPool2d>(2);
  net.emplace<nn::Flatten>();
  net.emplace<nn::Linear>(12, 4);
  randomize_parameters(net, generator);
  check_gradients(net, test::random_tensor({2, 2, 4, 4}, DType::f32, generator), generator, {});
}

// A ReLU then a 2x2 average pool run fused inside a Sequential (nn/sequential.h): the output,
// the input gradient and the parameter gradients are the bits of the same modules run one by
// one, and finite differences agree; a pool that does not fuse (3x3) takes the plain path.
BOOST_AUTO_TEST_CASE(relu_then_average_pool_fuse_with_the_same_bits) {
  Generator generator(16);
  for (const int pool_kernel : {2, 3}) {
    nn::Sequential net;
    auto& conv = net.emplace<nn::Conv2d>(2, 3, 3);
    auto& relu = net.emplace<nn::ReLU>();
    auto& pool = net.emplace<nn::AvgPool2d>(pool_kernel);
    randomize_parameters(net, generator);
    const Tensor x = test::random_tensor({2, 2, 9, 8}, DType::f32, generator);  // 7x6 out: odd rows
    net.zero_grad();
    MemoryStats& stats = memory_stats(Device::cpu());
    stats.reset_peaks();
    const std::int64_t before = stats.snapshot().current_of(MemoryCategory::activations);
    const Tensor y = net.forward(x);
    const std::int64_t peak = stats.snapshot().peak_of(MemoryCategory::activations) - before;
    const Tensor dy = test::random_tensor(y.shape(), DType::f32, generator);
    const Tensor dx = net.backward(dy);
    const Tensor dw = net.parameters()[0]->grad.clone();

    net.zero_grad();
    stats.reset_peaks();
    const std::int64_t before_apart = stats.snapshot().current_of(MemoryCategory::activations);
    // One module at a time, each output replacing the last, as a Sequential holds them.
    Tensor y_apart = conv.forward(x);
    y_apart = relu.forward(y_apart);
    y_apart = pool.forward(y_apart);
    const std::int64_t peak_apart =
        stats.snapshot().peak_of(MemoryCategory::activations) - before_apart;
    const Tensor dx_apart = conv.backward(relu.backward(pool.backward(dy)));
    const std::string what = "pool " + std::to_string(pool_kernel);
    BOOST_TEST(test::same_bits(y, y_apart), what);
    BOOST_TEST(test::same_bits(dx, dx_apart), what);
    BOOST_TEST(test::same_bits(dw, net.parameters()[0]->grad), what);
    // Fused, the ReLU's output is never allocated.
    if (pool_kernel == 2) {
      BOOST_TEST(peak < peak_apart, what);
    } else {
      BOOST_TEST(peak == peak_apart, what);
    }
  }
  nn::Sequential net;
  net.emplace<nn::ReLU>();
  net.emplace<nn::AvgPool2d>(2);
  check_gradients(net, away_from_zero({2, 3, 6, 5}, generator), generator, {});
}

BOOST_AUTO_TEST_CASE(residual_block_gradients) {
  for (const int stride : {1, 2}) {
    // Identity shortcut at stride 1 with equal widths, projection otherwise.
    const int out_channels = stride == 1 ? 3 : 4;
    Generator generator(16 + stride);
    nn::ResidualBlock block(3, out_channels, stride);
    randomize_parameters(block, generator);
    BOOST_TEST(block.parameters().size() == (stride == 1 ? 6u : 9u));
    check_gradients(block, test::random_tensor({2, 3, 4, 4}, DType::f32, generator), generator,
                    {1e-3f, 3e-2, 3e-3});
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_train_and_eval) {
  Generator generator(20);
  const int n = 4, c = 2, hw = 9;
  nn::BatchNorm2d bn(c);
  randomize_parameters(bn, generator);
  const Tensor x = test::random_tensor({n, c, 3, 3}, DType::f32, generator, -1.0f, 3.0f);
  const auto xs = test::to_doubles(x);
  const auto w = test::to_doubles(bn.weight().value);
  const auto b = test::to_doubles(bn.bias().value);

  // Training: batch statistics normalise; running stats move 10% towards them (the variance
  // unbiased, as PyTorch does).
  const Tensor y_train = bn.forward(x);
  std::vector<double> mean(c, 0.0), var(c, 0.0), expected_train(xs.size());
  const auto at = [&](int i, int ch, int k) { return (i * c + ch) * hw + k; };
  for (int ch = 0; ch < c; ++ch) {
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < hw; ++k)
        mean[ch] += xs[at(i, ch, k)] / (n * hw);
    }
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < hw; ++k)
        var[ch] += std::pow(xs[at(i, ch, k)] - mean[ch], 2) / (n * hw);
    }
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < hw; ++k) {
        expected_train[at(i, ch, k)] =
            (xs[at(i, ch, k)] - mean[ch]) / std::sqrt(var[ch] + 1e-5) * w[ch] + b[ch];
      }
    }
  }
  test::check_close(y_train, expected_train, 1e-5, 1e-5, "train-mode output");
  std::vector<double> running_mean(c), running_var(c);
  for (int ch = 0; ch < c; ++ch) {
    running_mean[ch] = 0.1 * mean[ch];
    running_var[ch] = 0.9 + 0.1 * var[ch] * (n * hw) / (n * hw - 1);
  }
  test::check_close(bn.running_mean().value, running_mean, 1e-5, 1e-6, "running_mean");
  test::check_close(bn.running_var().value, running_var, 1e-5, 1e-6, "running_var");

  // Evaluation: the running statistics normalise, and they stay put.
  bn.set_training(false);
  const Tensor y_eval = bn.forward(x);
  std::vector<double> expected_eval(xs.size());
  for (int ch = 0; ch < c; ++ch) {
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < hw; ++k) {
        expected_eval[at(i, ch, k)] =
            (xs[at(i, ch, k)] - running_mean[ch]) / std::sqrt(running_var[ch] + 1e-5) * w[ch] +
            b[ch];
      }
    }
  }
  test::check_close(y_eval, expected_eval, 1e-5, 1e-5, "eval-mode output");
  test::check_close(bn.running_mean().value, running_mean, 1e-5, 1e-6, "running_mean in eval");
  BOOST_CHECK_THROW(bn.backward(y_eval), Error);

  bn.set_training(true);
  bn.forward(x);
  test::check_close(bn.running_mean().value, {0.19 * mean[0], 0.19 * mean[1]}, 1e-5, 1e-6,
                    "running_mean after a second training step");
}

BOOST_AUTO_TEST_CASE(inputs_follow_the_parameters_dtype) {
  Generator generator(21);
  nn::Linear linear(4, 3);
  randomize_parameters(linear, generator);
  linear.cast_parameters(DType::f16, false);
  const Tensor x = test::random_tensor({2, 4}, DType::f32, generator);
  const Tensor y = linear.forward(x);
  BOOST_TEST((y.dtype() == DType::f16));
  linear.zero_grad();
  const Tensor dx = linear.backward(test::random_tensor({2, 3}, DType::f16, generator));
  // The gradient goes back in the dtype the input came in.
  BOOST_TEST((dx.dtype() == DType::f32));
  BOOST_TEST((linear.weight().grad.dtype() == DType::f16));

  // Batch norm keeps fp32 parameters with a half input and answers in the input's dtype.
  nn::BatchNorm2d bn(2);
  const Tensor h = test::random_tensor({2, 2, 3, 3}, DType::bf16, generator);
  bn.zero_grad();
  BOOST_TEST((bn.forward(h).dtype() == DType::bf16));
  BOOST_TEST((bn.backward(test::random_tensor({2, 2, 3, 3}, DType::bf16, generator)).dtype() ==
              DType::bf16));
  BOOST_TEST((bn.weight().grad.dtype() == DType::f32));

  // With half parameters (keep_batchnorm_fp32 off) an fp32 input is converted.
  bn.cast_parameters(DType::f16, false);
  BOOST_TEST(
      (bn.forward(test::random_tensor({2, 2, 3, 3}, DType::f32, generator)).dtype() == DType::f16));
}

BOOST_AUTO_TEST_CASE(invalid_configurations_are_rejected) {
  BOOST_CHECK_THROW(nn::Linear(0, 3), Error);
  BOOST_CHECK_THROW(nn::Conv2d(1, 2, 3, 0), Error);
  BOOST_CHECK_THROW(nn::AvgPool2d(0), Error);
  BOOST_CHECK_THROW(nn::MaxPool2d(2, 2, 2), Error);
  BOOST_CHECK_THROW(nn::BatchNorm2d(2, 1.5f), Error);
}

BOOST_AUTO_TEST_SUITE_END()
