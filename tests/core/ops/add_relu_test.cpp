#include "core/ops/add_relu.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/relu.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// Random values with special ones planted from `start` on: signed zeros, NaN and infinities of
// both signs, so sums hit -0 + -0, inf - inf and NaN. Two operands get different starts: which
// NaN payload a sum of two NaNs keeps is the compiler's choice of operand order.
Tensor with_specials(const Shape& shape, DType dtype, Generator& generator, std::size_t start) {
  std::vector<float> values = random_tensor(shape, DType::f32, generator).to_floats();
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {-0.0f, 0.0f, std::numeric_limits<float>::quiet_NaN(), inf, -inf};
  for (std::size_t i = start; i < values.size(); i += 37)
    values[i] = specials[(i / 37) % 5];
  // -0 meets -0 here, the one special pair the different starts would miss.
  values[values.size() - 1] = -0.0f;
  return Tensor::from_floats(shape, values, dtype);
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

// The second shape is large enough for the thread pool.
const Shape kShapes[] = {{3, 5, 7, 11}, {4, 16, 32, 32}};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(add_relu, TwoThreads)

BOOST_AUTO_TEST_CASE(forward_matches_float64_reference) {
  Generator generator(1);
  for (const DType a_dtype : kFloatTypes) {
    // b in a's dtype, or f32 (O1's promoted residual sum meets an fp32 input).
    for (const DType b_dtype : {a_dtype, DType::f32}) {
      for (const Shape& shape : kShapes) {
        const std::string what =
            std::string(dtype_name(a_dtype)) + " + " + dtype_name(b_dtype) + " " + shape_str(shape);
        const Tensor a = random_tensor(shape, a_dtype, generator);
        const Tensor b = random_tensor(shape, b_dtype, generator);
        const Tensor y = add_relu_forward(a, b);
        BOOST_TEST((y.dtype() == a_dtype));
        BOOST_TEST((y.shape() == shape));
        const auto av = to_doubles(a), bv = to_doubles(b);
        std::vector<double> expected(av.size());
        for (std::size_t i = 0; i < av.size(); ++i)
          expected[i] = std::max(0.0, av[i] + bv[i]);
        // One rounding of the sum into a's dtype; the zeros are exact.
        check_close(y, expected, dtype_tolerance(a_dtype), 0.0, "add_relu_forward " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(forward_is_bitwise_relu_of_add) {
  Generator generator(2);
  for (const DType a_dtype : kFloatTypes) {
    for (const DType b_dtype : kFloatTypes) {
      for (const Shape& shape : kShapes) {
        const std::string what =
            std::string(dtype_name(a_dtype)) + " + " + dtype_name(b_dtype) + " " + shape_str(shape);
        const Tensor a = with_specials(shape, a_dtype, generator, 0);
        const Tensor b = with_specials(shape, b_dtype, generator, 5);
        BOOST_TEST(same_bits(add_relu_forward(a, b), relu_forward(add(a, b))), what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_float64_reference_and_unfused_bits) {
  Generator generator(3);
  for (const DType y_dtype : kFloatTypes) {
    for (const DType dy_dtype : kFloatTypes) {
      for (const DType main_dtype : {y_dtype, DType::f32}) {
        const Shape shape = kShapes[1];
        const std::string what = std::string("y ") + dtype_name(y_dtype) + " dy " +
                                 dtype_name(dy_dtype) + " d_main " + dtype_name(main_dtype);
        const Tensor y = relu_forward(add(random_tensor(shape, y_dtype, generator),
                                          random_tensor(shape, y_dtype, generator, -1.0f, 0.5f)));
        const Tensor dy = with_specials(shape, dy_dtype, generator, 0);
        const Tensor d_main = with_specials(shape, main_dtype, generator, 5);
        const Tensor dx = add_relu_backward(y, dy, d_main);
        BOOST_TEST((dx.dtype() == main_dtype));
        BOOST_TEST(same_bits(dx, add(d_main, relu_backward(y, dy))), what);

        const Tensor finite_dy = random_tensor(shape, dy_dtype, generator);
        const Tensor finite_main = random_tensor(shape, main_dtype, generator);
        const auto yv = to_doubles(y), gv = to_doubles(finite_dy), mv = to_doubles(finite_main);
        std::vector<double> expected(yv.size());
        for (std::size_t i = 0; i < yv.size(); ++i)
          expected[i] = mv[i] + (yv[i] > 0.0 ? gv[i] : 0.0);
        check_close(add_relu_backward(y, finite_dy, finite_main), expected,
                    dtype_tolerance(main_dtype), 1e-7, "add_relu_backward " + what);
      }
    }
  }
}

// da = db = dy where a + b > 0: the backward with d_main = 0 is the gradient of
// sum(dy * add_relu_forward(a, b)) with respect to either summand.
BOOST_AUTO_TEST_CASE(backward_matches_central_differences) {
  Generator generator(4);
  const Shape shape{2, 3, 4, 5};
  // Sums at least 0.1 from the kink, so a step of 1e-2 never crosses it.
  std::vector<float> a_values = random_tensor(shape, DType::f32, generator).to_floats();
  const std::vector<float> b_values = random_tensor(shape, DType::f32, generator).to_floats();
  for (std::size_t i = 0; i < a_values.size(); ++i) {
    const float sum = a_values[i] + b_values[i];
    if (std::fabs(sum) < 0.1f) a_values[i] += sum < 0.0f ? -0.2f : 0.2f;
  }
  Tensor a = Tensor::from_floats(shape, a_values, DType::f32);
  Tensor b = Tensor::from_floats(shape, b_values, DType::f32);
  const Tensor dy = random_tensor(shape, DType::f32, generator);
  const auto weights = to_doubles(dy);
  const auto loss = [&] { return weighted_sum(add_relu_forward(a, b), weights); };
  const Tensor grad =
      add_relu_backward(add_relu_forward(a, b), dy, Tensor::zeros(shape, DType::f32));
  check_close(grad, numerical_gradient(loss, a, 1e-2f), 1e-3, 1e-4, "da");
  check_close(grad, numerical_gradient(loss, b, 1e-2f), 1e-3, 1e-4, "db");
}

BOOST_AUTO_TEST_CASE(rejects_bad_inputs) {
  const Tensor x = Tensor::zeros({2, 3}, DType::f32);
  const auto names_op = [](const Error& error) {
    return std::string(error.what()).find("add_relu") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(add_relu_forward(x, Tensor::zeros({3, 2}, DType::f32)), Error, names_op);
  BOOST_CHECK_EXCEPTION(add_relu_forward(x, Tensor::zeros({2, 3}, DType::i32)), Error, names_op);
  BOOST_CHECK_EXCEPTION(add_relu_backward(x, Tensor::zeros({6}, DType::f32), x), Error, names_op);
  BOOST_CHECK_EXCEPTION(add_relu_backward(x, x, Tensor::zeros({2, 4}, DType::f16)), Error,
                        names_op);
  BOOST_CHECK_EXCEPTION(add_relu_backward(Tensor(), x, x), Error, names_op);
}

BOOST_AUTO_TEST_SUITE_END()
