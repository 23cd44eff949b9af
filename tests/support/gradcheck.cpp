#include "tests/support/gradcheck.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <sstream>

namespace alloy::test {

Tensor random_tensor(const Shape& shape, DType dtype, Generator& generator, float low, float high) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& value : values) {
    value = low + (high - low) * static_cast<float>(generator.uniform());
  }
  return Tensor::from_floats(shape, values, dtype);
}

Tensor multiplied(const Tensor& tensor, float factor) {
  std::vector<float> values = tensor.to_floats();
  for (float& value : values)
    value *= factor;
  return Tensor::from_floats(tensor.shape(), values);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

bool same_bits_but_nan_payloads(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.shape() != b.shape() || a.dtype() != b.dtype())
    return same_bits(a, b);
  // Widening to f32 is exact, so equal f32 bits mean equal stored bits for f16 and bf16 too.
  const std::vector<float> left = a.to_floats(), right = b.to_floats();
  for (std::size_t i = 0; i < left.size(); ++i) {
    if (std::isnan(left[i]) && std::isnan(right[i])) continue;
    if (std::memcmp(&left[i], &right[i], sizeof(float)) != 0) return false;
  }
  return true;
}

std::vector<double> to_doubles(const Tensor& tensor) {
  const auto floats = tensor.to_floats();
  return {floats.begin(), floats.end()};
}

void check_close(const std::vector<double>& actual, const std::vector<double>& expected,
                 double rtol, double atol, const std::string& what) {
  BOOST_TEST_REQUIRE(actual.size() == expected.size(),
                     what << ": size " << actual.size() << " vs expected " << expected.size());
  std::size_t bad = 0;
  std::size_t worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    // Equal values pass outright: an infinity where one is due (an overflow) is exact.
    if (actual[i] == expected[i]) continue;
    const double allowed = atol + rtol * std::fabs(expected[i]);
    const double error = std::fabs(actual[i] - expected[i]);
    const double excess = std::isnan(error) ? INFINITY : error - allowed;
    if (!(error <= allowed)) ++bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  std::ostringstream message;
  if (bad > 0) {
    message << what << ": " << bad << " of " << actual.size() << " elements out of tolerance (rtol "
            << rtol << ", atol " << atol << "); worst at " << worst << ": got " << actual[worst]
            << ", expected " << expected[worst];
  }
  BOOST_TEST(bad == 0u, message.str());
}

void check_close(const Tensor& actual, const std::vector<double>& expected, double rtol,
                 double atol, const std::string& what) {
  check_close(to_doubles(actual), expected, rtol, atol, what);
}

std::vector<double> numerical_gradient(const std::function<double()>& loss, Tensor& input,
                                       float step) {
  BOOST_TEST_REQUIRE((input.dtype() == DType::f32),
                     "numerical_gradient perturbs f32 tensors only, got " << input.str());
  float* values = input.data<float>();
  std::vector<double> gradient(static_cast<std::size_t>(input.numel()));
  for (std::size_t i = 0; i < gradient.size(); ++i) {
    const float original = values[i];
    values[i] = original + step;
    const double plus = loss();
    values[i] = original - step;
    const double minus = loss();
    values[i] = original;
    // Divide by the step actually taken, which float rounding may have changed.
    const double taken =
        static_cast<double>(original + step) - static_cast<double>(original - step);
    gradient[i] = (plus - minus) / taken;
  }
  return gradient;
}

std::vector<double> numerical_gradient_off_kinks(const std::function<double()>& loss,
                                                 const std::function<Piece()>& piece, Tensor& input,
                                                 float step) {
  BOOST_TEST_REQUIRE((input.dtype() == DType::f32),
                     "numerical_gradient_off_kinks perturbs f32 tensors only, got " << input.str());
  loss();
  const Piece centre = piece();
  float* values = input.data<float>();
  std::vector<double> gradient(static_cast<std::size_t>(input.numel()));
  for (std::size_t i = 0; i < gradient.size(); ++i) {
    const float original = values[i];
    values[i] = original + step;
    const double plus = loss();
    const bool plus_smooth = piece() == centre;
    values[i] = original - step;
    const double minus = loss();
    const bool minus_smooth = piece() == centre;
    values[i] = original;
    const double taken =
        static_cast<double>(original + step) - static_cast<double>(original - step);
    gradient[i] = plus_smooth && minus_smooth ? (plus - minus) / taken : NAN;
  }
  return gradient;
}

void check_close_off_kinks(const std::vector<double>& actual, const std::vector<double>& expected,
                           double rtol, double atol, double max_skipped_share,
                           const std::string& what) {
  BOOST_TEST_REQUIRE(actual.size() == expected.size());
  std::vector<double> kept_actual;
  std::vector<double> kept_expected;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) continue;
    kept_actual.push_back(actual[i]);
    kept_expected.push_back(expected[i]);
  }
  const std::size_t skipped = actual.size() - kept_actual.size();
  BOOST_TEST(static_cast<double>(skipped) <= max_skipped_share * static_cast<double>(actual.size()),
             what << ": " << skipped << " of " << actual.size() << " elements sit on a kink");
  check_close(kept_actual, kept_expected, rtol, atol, what);
}

double weighted_sum(const Tensor& y, const std::vector<double>& weights) {
  const auto values = y.to_floats();
  BOOST_TEST_REQUIRE(values.size() == weights.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i)
    sum += static_cast<double>(values[i]) * weights[i];
  return sum;
}

double dtype_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 4.0 * 0x1.0p-11;
    case DType::bf16:
      return 4.0 * 0x1.0p-8;
    default:
      return 1e-5;
  }
}

}  // namespace alloy::test
