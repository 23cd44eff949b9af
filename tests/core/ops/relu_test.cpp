#include "core/ops/relu.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>

#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

std::vector<double> reference_relu(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = x[i] > 0.0 ? x[i] : 0.0;
  return y;
}

// Values at least `gap` away from the kink at 0, so central differences never straddle it.
Tensor away_from_zero(const Shape& shape, DType dtype, Generator& generator, float gap) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& value : values) {
    const float magnitude = gap + (1.0f - gap) * static_cast<float>(generator.uniform());
    value = generator.below(2) ? magnitude : -magnitude;
  }
  return Tensor::from_floats(shape, values, dtype);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(relu)

BOOST_AUTO_TEST_CASE(forward_matches_reference_in_every_dtype) {
  Generator generator(1);
  for (const DType dtype : kFloatTypes) {
    // The second shape is large enough to run on the thread pool.
    for (const Shape& shape : {Shape{3, 5, 7, 11}, Shape{4, 16, 32, 32}}) {
      const Tensor x = random_tensor(shape, dtype, generator);
      const Tensor y = relu_forward(x);
      BOOST_TEST((y.dtype() == dtype));
      BOOST_TEST((y.shape() == shape));
      check_close(y, reference_relu(to_doubles(x)), 0.0, 0.0,
                  std::string("relu forward ") + dtype_name(dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(special_values) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dtype : kFloatTypes) {
    const Tensor x = Tensor::from_floats({6}, {nan, -nan, -0.0f, inf, -inf, -1e-30f}, dtype);
    const auto y = relu_forward(x).to_floats();
    BOOST_TEST(std::isnan(y[0]), dtype_name(dtype) << ": NaN propagates");
    BOOST_TEST(std::isnan(y[1]), dtype_name(dtype) << ": negative NaN propagates");
    BOOST_TEST((y[2] == 0.0f && !std::signbit(y[2])), dtype_name(dtype) << ": -0 gives +0");
    BOOST_TEST(y[3] == inf);
    BOOST_TEST((y[4] == 0.0f && !std::signbit(y[4])), dtype_name(dtype) << ": -inf gives +0");
    BOOST_TEST((y[5] == 0.0f && !std::signbit(y[5])));
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_central_differences) {
  Generator generator(2);
  Tensor x = away_from_zero({2, 3, 4, 5}, DType::f32, generator, 0.05f);
  const Tensor weights = random_tensor(x.shape(), DType::f32, generator);
  const std::vector<double> w = to_doubles(weights);
  const auto loss = [&] { return weighted_sum(relu_forward(x), w); };
  const std::vector<double> numerical = numerical_gradient(loss, x, 1e-2f);
  const Tensor dx = relu_backward(relu_forward(x), weights);
  check_close(dx, numerical, 1e-4, 1e-5, "relu dx vs central differences");
}

BOOST_AUTO_TEST_CASE(backward_in_half_and_mixed_dtypes) {
  Generator generator(3);
  for (const DType y_dtype : kFloatTypes) {
    for (const DType dy_dtype : kFloatTypes) {
      const Tensor x = away_from_zero({4, 16, 32, 32}, y_dtype, generator, 0.01f);
      const Tensor y = relu_forward(x);
      const Tensor dy = random_tensor(x.shape(), dy_dtype, generator);
      const Tensor dx = relu_backward(y, dy);
      BOOST_TEST((dx.dtype() == dy_dtype));
      const auto xs = to_doubles(x);
      auto expected = to_doubles(dy);
      for (std::size_t i = 0; i < expected.size(); ++i) {
        if (!(xs[i] > 0.0)) expected[i] = 0.0;
      }
      check_close(
          dx, expected, 0.0, 0.0,
          std::string("relu dx, y ") + dtype_name(y_dtype) + ", dy " + dtype_name(dy_dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_blocks_nan_and_zero_outputs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dtype : kFloatTypes) {
    const Tensor y = Tensor::from_floats({4}, {nan, 0.0f, 2.0f, -nan}, dtype);
    const Tensor dy = Tensor::from_floats({4}, {1.0f, 1.0f, 1.0f, 1.0f}, dtype);
    const auto dx = relu_backward(y, dy).to_floats();
    BOOST_TEST(dx[0] == 0.0f);
    BOOST_TEST(dx[1] == 0.0f);
    BOOST_TEST(dx[2] == 1.0f);
    BOOST_TEST(dx[3] == 0.0f);
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_inputs) {
  const Tensor labels = Tensor::zeros({4}, DType::i32);
  BOOST_CHECK_THROW(relu_forward(labels), Error);
  BOOST_CHECK_THROW(relu_forward(Tensor()), Error);
  const Tensor y = Tensor::zeros({2, 3}, DType::f32);
  BOOST_CHECK_THROW(relu_backward(y, Tensor::zeros({3, 2}, DType::f32)), Error);
  BOOST_CHECK_THROW(relu_backward(y, Tensor::zeros({2, 3}, DType::u8)), Error);
}

BOOST_AUTO_TEST_SUITE_END()
