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
    for (int j = 1; j < kClasses; ++j) max = std::max(max, row[j]);
    double sum = 0.0;
    for (int j = 0; j < kClasses; ++j) sum += std::exp(row[j] - max);
    total += max + std::log(sum) - row[labels[static_cast<std::size_t>(i)]];
  }
  return total / kBatch;
}

void check_network(nn::Sequential& net, const Shape& input_shape, std::uint64_t seed,
                   float step, double rtol, double atol) {
  Generator generator(seed);
  for (nn::Parameter* p : net.parameters()) {
    const float centre = p->is_norm && p->name.find("weight") != std::string::npos ? 1.0f : 0.0f;
    p->value.copy_from(
        test::random_tensor(p->value.shape(), DType::f32, generator, centre - 0.5f, centre + 0.5f));
  }
  Tensor x = test::random_tensor(input_shape, DType::f32, generator);
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
  for (const nn::Parameter* p : net.parameters()) analytic.push_back(test::to_doubles(p->grad));

  const auto loss = [&] { return cross_entropy(net.forward(x), labels); };
  // ReLU and max pooling make the loss piecewise smooth; elements within a step of a kink
  // have no derivative to compare against and are left out (a few percent at most).
  constexpr double kMaxKinkShare = 0.1;
  test::check_close_off_kinks(analytic_dx,
                              test::numerical_gradient_off_kinks(loss, x, step, rtol, atol), rtol,
                              atol, kMaxKinkShare, "dx");
  std::size_t index = 0;
  for (nn::Parameter* p : net.parameters()) {
    test::check_close_off_kinks(
        analytic[index++], test::numerical_gradient_off_kinks(loss, p->value, step, rtol, atol),
        rtol, atol, kMaxKinkShare, "d" + p->name);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_network_gradcheck)

BOOST_AUTO_TEST_CASE(conv_relu_pool_linear) {
  nn::Sequential net;
  net.emplace<nn::Conv2d>(1, 3, 3, 1, 1);
  net.emplace<nn::ReLU>();
  net.emplace<nn::MaxPool2d>(2);  // 6 -> 3
  net.emplace<nn::Conv2d>(3, 4, 2);  // -> 2
  net.emplace<nn::ReLU>();
  net.emplace<nn::AvgPool2d>(2);  // -> 1
  net.emplace<nn::Flatten>();
  net.emplace<nn::Linear>(4, kClasses);
  check_network(net, {kBatch, 1, 6, 6}, 30, 1e-3f, 2e-2, 2e-4);
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
  check_network(net, {kBatch, 1, 6, 6}, 31, 1e-3f, 3e-2, 3e-4);
}

BOOST_AUTO_TEST_SUITE_END()
