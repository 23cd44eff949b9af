// Whole networks against central differences of the mean softmax cross-entropy: the layers'
// backward passes composed through Sequential and the residual block, as training uses them.
#include <boost/test/unit_test.hpp>
#include <cmath>
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
#include "core/ops/pool2d.h"
#include "core/ops/softmax_cross_entropy.h"
#include "tests/support/gradcheck.h"

using namespace alloy;

namespace {

constexpr int kBatch = 3;
constexpr int kClasses = 4;

// The mean cross-entropy in double from the logits, so the finite differences see the
// network's own rounding only.
double cross_entropy(const Tensor& logits, const std::vector<int>& labels) {
  const auto values = test::to_doubles(logits);
  double total = 0.0;
  for (int i = 0; i < kBatch; ++i) {
    const double* row = values.data() + i * kClasses;
    double max = row[0];
    for (int j = 1; j < kClasses; ++j)
      max = std::max(max, row[j]);
    double sum = 0.0;
    for (int j = 0; j < kClasses; ++j)
      sum += std::exp(row[j] - max);
    total += max + std::log(sum) - row[labels[static_cast<std::size_t>(i)]];
  }
  return total / kBatch;
}

// Runs the network layer by layer as Sequential::forward does, noting the smooth piece of the
// loss it evaluates in: the sign of every ReLU input and the winner of every max-pooling
// window. ReLUs inside residual blocks are out of sight; see kink_free_batch_norms.
Tensor forward_noting_piece(nn::Sequential& net, const Tensor& x, test::Piece& piece) {
  piece.clear();
  Tensor y = x;
  for (std::size_t i = 0; i < net.size(); ++i) {
    nn::Module& layer = net[i];
    if (layer.type_name() == "ReLU") {
      for (const float value : y.to_floats())
        piece.push_back(value > 0.0f);
    } else if (layer.type_name() == "MaxPool2d") {
      BOOST_TEST_REQUIRE(layer.options() == "kernel=2, stride=2, padding=0");
      const Tensor argmax = max_pool2d_forward(y, Pool2dParams{}).argmax;
      const std::int32_t* winners = argmax.data<std::int32_t>();
      piece.insert(piece.end(), winners, winners + argmax.numel());
    }
    y = layer.forward(y);
  }
  return y;
}

// Parameters uniform in [-0.5, 0.5], batch-norm weights in [0.5, 1.5].
void randomize(nn::Sequential& net, Generator& generator) {
  for (nn::Parameter* p : net.parameters()) {
    const float centre = p->is_norm && p->name.find("weight") != std::string::npos ? 1.0f : 0.0f;
    p->value.copy_from(
        test::random_tensor(p->value.shape(), DType::f32, generator, centre - 0.5f, centre + 0.5f));
  }
}

// Batch norm maps each channel to gamma * xhat + beta with |xhat| <= sqrt(M - 1) for M values
// per channel, whatever the data. With gamma in [0.1, 0.2] and beta in [2.5, 3] for even
// channels and in [-6, -5] for odd ones, and at most 108 values per channel (|xhat| <= 10.4),
// every ReLU input of these networks, residual sums included, stays more than 0.4 from zero:
// even channels are always on, odd ones always off. A step of 0.01 in any parameter moves
// them by at most 0.11 (through gamma), so no step crosses a kink and the ReLUs hidden inside
// residual blocks need no watching.
void kink_free_batch_norms(nn::Sequential& net, Generator& generator) {
  for (nn::Parameter* p : net.parameters()) {
    if (!p->is_norm) continue;
    const bool is_weight = p->name.find("weight") != std::string::npos;
    std::vector<float> values(static_cast<std::size_t>(p->value.numel()));
    for (std::size_t c = 0; c < values.size(); ++c) {
      const auto u = static_cast<float>(generator.uniform());
      values[c] = is_weight ? 0.1f + 0.1f * u : (c % 2 == 0 ? 2.5f + 0.5f * u : -6.0f + u);
    }
    p->value.copy_from_floats(values);
  }
}

// Every gradient of the network (input and parameters) against central differences. The
// networks below are built so that no step crosses a kink; an element whose step does is
// reported and fails the check rather than being compared.
void check_network(nn::Sequential& net, const Tensor& input, Generator& generator, float step,
                   double rtol, double atol) {
  constexpr double kMaxKinkShare = 0.0;
  Tensor x = input.clone();
  std::vector<int> labels(kBatch);
  std::vector<float> label_values;
  for (auto& label : labels) {
    label = static_cast<int>(generator.below(kClasses));
    label_values.push_back(static_cast<float>(label));
  }
  const Tensor label_tensor = Tensor::from_floats({kBatch}, label_values, DType::i32);

  net.zero_grad();
  const Tensor logits = net.forward(x);
  const SoftmaxCrossEntropyResult result = softmax_cross_entropy_forward(logits, label_tensor);
  BOOST_TEST(result.loss.to_floats()[0] == cross_entropy(logits, labels),
             boost::test_tools::tolerance(1e-5));
  const Tensor dx = net.backward(
      softmax_cross_entropy_backward(result.probabilities, label_tensor, 1.0f, logits.dtype()));
  BOOST_TEST_REQUIRE(dx.defined());
  const auto analytic_dx = test::to_doubles(dx);
  std::vector<std::vector<double>> analytic;
  for (const nn::Parameter* p : net.parameters())
    analytic.push_back(test::to_doubles(p->grad));

  test::Piece piece;
  const auto loss = [&] { return cross_entropy(forward_noting_piece(net, x, piece), labels); };
  const auto last_piece = [&] { return piece; };
  test::check_close_off_kinks(analytic_dx,
                              test::numerical_gradient_off_kinks(loss, last_piece, x, step), rtol,
                              atol, kMaxKinkShare, "dx");
  std::size_t index = 0;
  for (nn::Parameter* p : net.parameters()) {
    test::check_close_off_kinks(
        analytic[index++], test::numerical_gradient_off_kinks(loss, last_piece, p->value, step),
        rtol, atol, kMaxKinkShare, "d" + p->name);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_network_gradcheck)

BOOST_AUTO_TEST_CASE(conv_relu_pool_linear) {
  nn::Sequential net;
  net.emplace<nn::Conv2d>(1, 3, 3, 1, 1);
  net.emplace<nn::ReLU>();
  net.emplace<nn::MaxPool2d>(2);     // 6 -> 3
  net.emplace<nn::Conv2d>(3, 4, 2);  // -> 2
  net.emplace<nn::ReLU>();
  net.emplace<nn::AvgPool2d>(2);  // -> 1
  net.emplace<nn::Flatten>();
  net.emplace<nn::Linear>(4, kClasses);
  // Hundreds of ReLU inputs and max-pooling windows: with most seeds some ReLU input or some
  // window's runner-up lies within a step of its kink for a few first-layer weights. This
  // seed leaves every one more than four steps away, and the check asserts that none of the
  // perturbations below changes a ReLU sign or a window's winner.
  Generator generator(46);
  randomize(net, generator);
  const Tensor x = test::random_tensor({kBatch, 1, 6, 6}, DType::f32, generator);
  check_network(net, x, generator, 1e-3f, 2e-3, 2e-5);
}

BOOST_AUTO_TEST_CASE(tiny_resnet) {
  nn::Sequential net;
  net.emplace<nn::Conv2d>(1, 4, 3, 1, 1, false);
  net.emplace<nn::BatchNorm2d>(4);
  net.emplace<nn::ReLU>();
  net.emplace<nn::ResidualBlock>(4, 4, 1);
  net.emplace<nn::ResidualBlock>(4, 6, 2);  // 6 -> 3
  net.emplace<nn::AvgPool2d>(3);
  net.emplace<nn::Flatten>();
  net.emplace<nn::Linear>(6, kClasses);
  Generator generator(31);
  randomize(net, generator);
  kink_free_batch_norms(net, generator);
  const Tensor x = test::random_tensor({kBatch, 1, 6, 6}, DType::f32, generator);
  // Without kinks a large step is safe, and it keeps fp32 rounding of the loss small next to
  // the difference. The watched ReLU confirms what kink_free_batch_norms promises.
  check_network(net, x, generator, 1e-2f, 5e-3, 4e-5);
}

BOOST_AUTO_TEST_SUITE_END()
