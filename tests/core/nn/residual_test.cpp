// nn::Residual: y = x + body(x) and dx = dy + body.backward(dy) against hand computations with
// a Linear body (in double), gradient accumulation, the names, needs_input_grad and the
// grad-ready hook, errors, and O1's promotion of the sum. Recomputation: recompute_test.cpp.
#include "core/nn/residual.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/nn/cast_policy.h"
#include "core/nn/gelu.h"
#include "core/nn/linear.h"
#include "core/nn/sequential.h"
#include "core/ops/elementwise.h"
#include "tests/support/gradcheck.h"

using namespace alloy;

namespace {

constexpr int kRows = 3;
constexpr int kFeatures = 5;

// A Residual around Linear(5, 5) with random parameters; `linear` is the body.
struct LinearResidual {
  nn::Linear* linear;
  nn::Residual residual;

  explicit LinearResidual(Generator& generator) : residual(make(generator, linear)) {}

  static std::unique_ptr<nn::Module> make(Generator& generator, nn::Linear*& linear) {
    auto body = std::make_unique<nn::Linear>(kFeatures, kFeatures);
    for (nn::Parameter* p : body->parameters())
      p->value.copy_from(test::random_tensor(p->value.shape(), DType::f32, generator));
    linear = body.get();
    return body;
  }
};

// Row-major [rows, cols] matrices in double.
using Matrix = std::vector<double>;

// x + x W^T + b.
Matrix expected_forward(const Matrix& x, const Matrix& w, const Matrix& b) {
  Matrix y(x.size());
  for (int n = 0; n < kRows; ++n) {
    for (int o = 0; o < kFeatures; ++o) {
      double sum = x[n * kFeatures + o] + b[o];
      for (int i = 0; i < kFeatures; ++i)
        sum += x[n * kFeatures + i] * w[o * kFeatures + i];
      y[n * kFeatures + o] = sum;
    }
  }
  return y;
}

// dx = dy + dy W, dW = dy^T x, db = the column sums of dy.
struct Grads {
  Matrix dx, dw, db;
};
Grads expected_backward(const Matrix& x, const Matrix& w, const Matrix& dy) {
  Grads g{Matrix(x.size()), Matrix(w.size()), Matrix(kFeatures)};
  for (int n = 0; n < kRows; ++n) {
    for (int i = 0; i < kFeatures; ++i) {
      double sum = dy[n * kFeatures + i];
      for (int o = 0; o < kFeatures; ++o)
        sum += dy[n * kFeatures + o] * w[o * kFeatures + i];
      g.dx[n * kFeatures + i] = sum;
    }
  }
  for (int o = 0; o < kFeatures; ++o) {
    for (int n = 0; n < kRows; ++n) {
      g.db[o] += dy[n * kFeatures + o];
      for (int i = 0; i < kFeatures; ++i)
        g.dw[o * kFeatures + i] += dy[n * kFeatures + o] * x[n * kFeatures + i];
    }
  }
  return g;
}

Matrix plus(const Matrix& a, const Matrix& b) {
  Matrix sum(a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    sum[i] = a[i] + b[i];
  return sum;
}

std::unique_ptr<nn::Sequential> mlp_body() {
  auto body = std::make_unique<nn::Sequential>();
  body->emplace<nn::Linear>(4, 8);
  body->emplace<nn::GELU>(GeluApproximation::tanh);
  body->emplace<nn::Linear>(8, 4);
  return body;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_residual)

BOOST_AUTO_TEST_CASE(forward_and_backward_against_a_linear_body_by_hand) {
  Generator generator(1);
  LinearResidual net(generator);
  const Tensor x = test::random_tensor({kRows, kFeatures}, DType::f32, generator);
  const Matrix xs = test::to_doubles(x);
  const Matrix w = test::to_doubles(net.linear->weight().value);
  const Matrix b = test::to_doubles(net.linear->bias()->value);
  net.residual.zero_grad();

  const Tensor y = net.residual.forward(x);
  test::check_close(y, expected_forward(xs, w, b), 1e-6, 1e-6, "y = x + x W^T + b");
  const Tensor dy = test::random_tensor(y.shape(), DType::f32, generator);
  const Grads first = expected_backward(xs, w, test::to_doubles(dy));
  const Tensor dx = net.residual.backward(dy);
  test::check_close(dx, first.dx, 1e-6, 1e-6, "dx = dy + dy W");
  test::check_close(net.linear->weight().grad, first.dw, 1e-6, 1e-6, "dW = dy^T x");
  test::check_close(net.linear->bias()->grad, first.db, 1e-6, 1e-6, "db = sum dy");

  // A second backward, on another input, adds to the gradients.
  const Tensor x2 = test::random_tensor(x.shape(), DType::f32, generator);
  net.residual.forward(x2);
  const Tensor dy2 = test::random_tensor(y.shape(), DType::f32, generator);
  const Grads second = expected_backward(test::to_doubles(x2), w, test::to_doubles(dy2));
  test::check_close(net.residual.backward(dy2), second.dx, 1e-6, 1e-6, "second dx");
  test::check_close(net.linear->weight().grad, plus(first.dw, second.dw), 1e-6, 1e-6,
                    "accumulated dW");
  test::check_close(net.linear->bias()->grad, plus(first.db, second.db), 1e-6, 1e-6,
                    "accumulated db");
}

BOOST_AUTO_TEST_CASE(without_the_input_gradient_the_body_still_gets_its_own) {
  Generator generator(2);
  LinearResidual net(generator);
  const Tensor x = test::random_tensor({kRows, kFeatures}, DType::f32, generator);
  const Tensor dy = test::random_tensor({kRows, kFeatures}, DType::f32, generator);
  net.residual.set_needs_input_grad(false);
  net.residual.zero_grad();
  net.residual.forward(x);
  BOOST_TEST(!net.residual.backward(dy).defined());
  const Grads expected = expected_backward(
      test::to_doubles(x), test::to_doubles(net.linear->weight().value), test::to_doubles(dy));
  test::check_close(net.linear->weight().grad, expected.dw, 1e-6, 1e-6, "dW");
  test::check_close(net.linear->bias()->grad, expected.db, 1e-6, 1e-6, "db");
}

BOOST_AUTO_TEST_CASE(names_description_and_block) {
  nn::Sequential net;
  net.add(std::make_unique<nn::Residual>(mlp_body()));
  std::vector<std::string> names;
  for (const nn::Parameter* p : net.parameters())
    names.push_back(p->name);
  const std::vector<std::string> expected = {"0.body.0.weight", "0.body.0.bias", "0.body.2.weight",
                                             "0.body.2.bias"};
  BOOST_TEST(names == expected, boost::test_tools::per_element());
  nn::Residual residual(mlp_body());
  BOOST_TEST(residual.type_name() == "Residual");
  BOOST_TEST(residual.is_block());
  BOOST_TEST(residual.describe() ==
             "Residual()\nbody Sequential()\nbody.0 Linear() weight=[8, 4] bias=[8]\n"
             "body.1 GELU(approximate=tanh)\nbody.2 Linear() weight=[4, 8] bias=[4]\n");
}

BOOST_AUTO_TEST_CASE(the_grad_ready_hook_sees_the_parameters_reversed) {
  Generator generator(3);
  nn::Residual residual(mlp_body());
  for (nn::Parameter* p : residual.parameters())
    p->value.copy_from(test::random_tensor(p->value.shape(), DType::f32, generator));
  std::vector<std::string> seen;
  residual.set_grad_ready_hook([&](nn::Parameter& p) { seen.push_back(p.name); });
  residual.zero_grad();
  residual.forward(test::random_tensor({2, 4}, DType::f32, generator));
  residual.backward(test::random_tensor({2, 4}, DType::f32, generator));
  const std::vector<std::string> expected = {"body.2.bias", "body.2.weight", "body.0.bias",
                                             "body.0.weight"};
  BOOST_TEST(seen == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(errors_name_what_is_wrong) {
  BOOST_CHECK_THROW(nn::Residual(nullptr), Error);
  nn::Residual narrowing(std::make_unique<nn::Linear>(4, 3));
  BOOST_CHECK_EXCEPTION(
      narrowing.forward(Tensor::zeros({2, 4}, DType::f32)), Error,
      [](const Error& e) { return std::string(e.what()).find("[2, 3]") != std::string::npos; });
  nn::Residual residual(std::make_unique<nn::Linear>(4, 4));
  residual.zero_grad();
  BOOST_CHECK_THROW(residual.backward(Tensor::zeros({2, 4}, DType::f32)), Error);
  residual.set_training(false);
  residual.forward(Tensor::zeros({2, 4}, DType::f32));
  BOOST_CHECK_THROW(residual.backward(Tensor::zeros({2, 4}, DType::f32)), Error);
  residual.set_training(true);
  residual.forward(Tensor::zeros({2, 4}, DType::f32));
  residual.backward(Tensor::zeros({2, 4}, DType::f32));
  BOOST_CHECK_THROW(residual.backward(Tensor::zeros({2, 4}, DType::f32)), Error);
}

BOOST_AUTO_TEST_CASE(o1_adds_a_half_body_output_to_an_fp32_input_in_fp32) {
  nn::CastPolicy policy;
  policy.enabled = true;
  nn::set_cast_policy(policy);
  Generator generator(4);
  LinearResidual net(generator);
  const Tensor x = test::random_tensor({kRows, kFeatures}, DType::f32, generator);
  const Matrix w = test::to_doubles(net.linear->weight().value);
  net.residual.zero_grad();
  const Tensor y = net.residual.forward(x);
  BOOST_TEST((y.dtype() == DType::f32));
  // The half Linear rounds its operands and output to f16.
  test::check_close(
      y, expected_forward(test::to_doubles(x), w, test::to_doubles(net.linear->bias()->value)), 0.0,
      1e-2, "O1 y");
  const Tensor dy = test::random_tensor(y.shape(), DType::f32, generator);
  const Tensor dx = net.residual.backward(dy);
  BOOST_TEST((dx.dtype() == DType::f32));
  const Grads expected = expected_backward(test::to_doubles(x), w, test::to_doubles(dy));
  test::check_close(dx, expected.dx, 0.0, 1e-2, "O1 dx");
  BOOST_TEST((net.linear->weight().grad.dtype() == DType::f32));
  test::check_close(net.linear->weight().grad, expected.dw, 0.0, 1e-2, "O1 dW");
  // Exactly the fp32 sum of x and the body's f16 output.
  const Tensor branch = net.linear->forward(x);
  BOOST_TEST((branch.dtype() == DType::f16));
  BOOST_TEST(y.to_floats() == add(x, cast(branch, DType::f32)).to_floats());
  nn::clear_weight_cast_cache();
  nn::set_cast_policy(nn::CastPolicy{});
}

BOOST_AUTO_TEST_SUITE_END()
