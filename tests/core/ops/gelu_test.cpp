// GELU's CPU kernels against float64 references, central differences and special values.
#include "core/ops/gelu.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};
const GeluApproximation kApproximations[] = {GeluApproximation::none, GeluApproximation::tanh};

const double kSqrt2OverPi = std::sqrt(2.0 / M_PI);

// GELU at x in double: its value, derivative, the derivative's sum of |terms| (its two terms
// cancel near x = -0.75, where rounding errors scale with the terms, not the sum) and the
// |factor| that multiplies the gate's slope in the second term.
// Written with erfc and exp, which stay accurate in the negative tail, where 1 + erf and
// 1 + tanh cancel even in double.
struct Reference {
  double value;
  double derivative;
  double derivative_terms;
  double factor;
};

Reference reference(double x, GeluApproximation approximation) {
  if (approximation == GeluApproximation::none) {
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double density = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    return {x * cdf, cdf + x * density, cdf + std::fabs(x * density), std::fabs(x)};
  }
  const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
  const double du = kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
  const double s = 1.0 / (1.0 + std::exp(-2.0 * u));    // (1 + tanh u) / 2
  const double rest = 1.0 / (1.0 + std::exp(2.0 * u));  // 1 - s
  const double slope_term = 2.0 * x * du * s * rest;
  return {x * s, s + slope_term, s + std::fabs(slope_term), std::fabs(2.0 * x * du)};
}

// PyTorch's definitions, literally: for moderate x they must agree with reference().
double literal_value(double x, GeluApproximation approximation) {
  if (approximation == GeluApproximation::none)
    return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}
double literal_derivative(double x, GeluApproximation approximation) {
  if (approximation == GeluApproximation::none) {
    return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
           x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  }
  const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  const double du = kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

// The relative error of the fp32 arithmetic before the final rounding, in fp32 half-ulps.
// none: erfc and phi take -x^2 / 2 exactly, so a few roundings and the erfc fit's 2 (7.2
// measured). tanh: the rounding of exp's argument -2|u| grows by its slope (2|u| and the
// cubic's roundings), plus the same few.
double fp32_error(double x, GeluApproximation approximation) {
  if (approximation == GeluApproximation::none) return 12.0 * std::ldexp(1.0, -24);
  const double u = kSqrt2OverPi * (x + 0.044715 * x * x * x);
  return (x * x + 6.0 * std::fabs(u) + 16.0) * std::ldexp(1.0, -24);
}

// Half an ulp relative (the one rounding into dtype), and half the dtype's smallest subnormal
// (the absolute rounding error of a result that small).
double unit_roundoff(DType dtype) {
  return dtype == DType::f16    ? std::ldexp(1.0, -11)
         : dtype == DType::bf16 ? std::ldexp(1.0, -8)
                                : std::ldexp(1.0, -24);
}
double half_subnormal(DType dtype) {
  return dtype == DType::f16    ? std::ldexp(1.0, -25)
         : dtype == DType::bf16 ? std::ldexp(1.0, -134)
                                : std::ldexp(1.0, -150);
}
// Far in the tail the fp32 gate and slope are subnormal, with an absolute error of up to the
// smallest subnormal each.
const double kFp32Subnormal = std::ldexp(1.0, -149);

// |actual[i] - expected[i]| <= allowed[i] for all i, reporting the count and the worst one.
void check_within(const Tensor& actual, const std::vector<double>& expected,
                  const std::vector<double>& allowed, const std::vector<double>& inputs,
                  const std::string& what) {
  const std::vector<double> got = to_doubles(actual);
  BOOST_TEST_REQUIRE(got.size() == expected.size());
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double error = std::fabs(got[i] - expected[i]);
    if (error <= allowed[i]) continue;
    ++bad;
    const double ratio = std::isnan(error) ? INFINITY : error / allowed[i];
    if (ratio >= worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  std::ostringstream message;
  if (bad > 0) {
    message.precision(10);
    message << what << ": " << bad << " of " << got.size()
            << " out of tolerance; worst at x = " << inputs[worst] << ": got " << got[worst]
            << ", expected " << expected[worst] << ", allowed error " << allowed[worst];
  }
  BOOST_TEST(bad == 0u, message.str());
}

void check_forward(const Tensor& x, GeluApproximation approximation, const std::string& what) {
  const Tensor y = gelu_forward(x, approximation);
  BOOST_TEST((y.dtype() == x.dtype()));
  BOOST_TEST((y.shape() == x.shape()));
  const std::vector<double> xs = to_doubles(x);
  std::vector<double> expected(xs.size()), allowed(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    expected[i] = reference(xs[i], approximation).value;
    allowed[i] =
        (fp32_error(xs[i], approximation) + unit_roundoff(y.dtype())) * std::fabs(expected[i]) +
        half_subnormal(y.dtype()) + std::fabs(xs[i]) * kFp32Subnormal;
  }
  check_within(y, expected, allowed, xs, what);
}

void check_backward(const Tensor& x, const Tensor& dy, GeluApproximation approximation,
                    const std::string& what) {
  const Tensor dx = gelu_backward(x, dy, approximation);
  BOOST_TEST((dx.dtype() == dy.dtype()));
  BOOST_TEST((dx.shape() == x.shape()));
  const std::vector<double> xs = to_doubles(x);
  const std::vector<double> dys = to_doubles(dy);
  std::vector<double> expected(xs.size()), allowed(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Reference r = reference(xs[i], approximation);
    expected[i] = dys[i] * r.derivative;
    allowed[i] = fp32_error(xs[i], approximation) * std::fabs(dys[i]) * r.derivative_terms +
                 unit_roundoff(dx.dtype()) * std::fabs(expected[i]) + half_subnormal(dx.dtype()) +
                 std::fabs(dys[i]) * (1.0 + r.factor) * kFp32Subnormal;
  }
  check_within(dx, expected, allowed, xs, what);
}

std::string name(const char* what, GeluApproximation approximation, DType dtype) {
  return std::string(what) + " approximate=" + gelu_approximation_name(approximation) + " " +
         dtype_name(dtype);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gelu)

BOOST_AUTO_TEST_CASE(the_reference_is_pytorchs_definition) {
  // The erfc/exp forms of reference() against 0.5 x (1 + erf(x / sqrt 2)) and
  // 0.5 x (1 + tanh u) (and their derivatives), where double keeps those accurate.
  for (const GeluApproximation approximation : kApproximations) {
    for (double x = -5.0; x <= 5.0; x += 0.01) {
      const Reference r = reference(x, approximation);
      BOOST_TEST(std::fabs(r.value - literal_value(x, approximation)) <=
                 1e-8 * std::fabs(r.value) + 1e-15);
      BOOST_TEST(std::fabs(r.derivative - literal_derivative(x, approximation)) <= 1e-12);
    }
  }
  // Spot values of GELU (exact): x Phi(x) with Phi(1) = 0.8413447460685429.
  BOOST_TEST(std::fabs(reference(1.0, GeluApproximation::none).value - 0.8413447460685429) < 1e-15);
  BOOST_TEST(std::fabs(reference(-1.0, GeluApproximation::none).value + 0.15865525393145707) <
             1e-15);
}

BOOST_AUTO_TEST_CASE(forward_matches_reference_in_every_dtype) {
  Generator generator(1);
  for (const GeluApproximation approximation : kApproximations) {
    for (const DType dtype : kFloatTypes) {
      // The second shape is large enough to run on the thread pool.
      for (const Shape& shape : {Shape{3, 5, 7, 11}, Shape{4, 16, 32, 32}}) {
        check_forward(random_tensor(shape, dtype, generator, -5.0f, 5.0f), approximation,
                      name("forward", approximation, dtype));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_negative_tail_keeps_its_relative_accuracy) {
  // Where 1 + erf(x / sqrt 2) and 1 + tanh u cancel in fp32 (with thousands of ulps of error
  // at x = -4), the kernels' erfc and exp forms stay within fp32_error. Down to x = -11, where
  // the tanh gate underflows.
  Generator generator(2);
  for (const GeluApproximation approximation : kApproximations) {
    for (const DType dtype : kFloatTypes) {
      const Tensor x = random_tensor({2000}, dtype, generator, -11.0f, -3.0f);
      check_forward(x, approximation, name("tail forward", approximation, dtype));
      check_backward(x, random_tensor({2000}, dtype, generator), approximation,
                     name("tail backward", approximation, dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_the_analytic_derivative_in_mixed_dtypes) {
  Generator generator(3);
  for (const GeluApproximation approximation : kApproximations) {
    for (const DType x_dtype : kFloatTypes) {
      for (const DType dy_dtype : kFloatTypes) {
        const Tensor x = random_tensor({4, 16, 32, 32}, x_dtype, generator, -5.0f, 5.0f);
        const Tensor dy = random_tensor(x.shape(), dy_dtype, generator);
        check_backward(x, dy, approximation,
                       name("backward", approximation, x_dtype) + ", dy " + dtype_name(dy_dtype));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_central_differences) {
  for (const GeluApproximation approximation : kApproximations) {
    Generator generator(4);
    Tensor x = random_tensor({2, 3, 4, 5}, DType::f32, generator, -4.0f, 4.0f);
    const Tensor weights = random_tensor(x.shape(), DType::f32, generator);
    const std::vector<double> w = to_doubles(weights);
    const auto loss = [&] { return weighted_sum(gelu_forward(x, approximation), w); };
    const std::vector<double> numerical = numerical_gradient(loss, x, 1e-2f);
    check_close(gelu_backward(x, weights, approximation), numerical, 1e-3, 2e-4,
                name("dx vs central differences", approximation, DType::f32));
  }
}

BOOST_AUTO_TEST_CASE(special_values) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const GeluApproximation approximation : kApproximations) {
    for (const DType dtype : kFloatTypes) {
      BOOST_TEST_CONTEXT(name("special values", approximation, dtype)) {
        // f16 holds at most 65504.
        const float big = dtype == DType::f16 ? 6e4f : 3e38f;
        const Tensor x =
            Tensor::from_floats({9}, {0.0f, -0.0f, inf, -inf, nan, 1e4f, -1e4f, big, -big}, dtype);
        const auto y = gelu_forward(x, approximation).to_floats();
        BOOST_TEST((y[0] == 0.0f && !std::signbit(y[0])));
        BOOST_TEST((y[1] == 0.0f && std::signbit(y[1])));
        BOOST_TEST(y[2] == inf);
        BOOST_TEST((y[3] == 0.0f && std::signbit(y[3])), "-inf gives the limit -0, got " << y[3]);
        BOOST_TEST(std::isnan(y[4]));
        BOOST_TEST(y[5] == x.to_floats()[5]);
        BOOST_TEST((y[6] == 0.0f && std::signbit(y[6])));
        BOOST_TEST(y[7] == x.to_floats()[7]);
        BOOST_TEST((y[8] == 0.0f && std::signbit(y[8])));

        const Tensor dy = Tensor::from_floats({9}, std::vector<float>(9, 2.0f), dtype);
        const auto dx = gelu_backward(x, dy, approximation).to_floats();
        // GELU'(0) = 1/2; far out and at the infinities the limits 1 and 0.
        const std::vector<float> expected = {1.0f, 1.0f, 2.0f, 0.0f, nan, 2.0f, 0.0f, 2.0f, 0.0f};
        for (std::size_t i = 0; i < expected.size(); ++i) {
          if (std::isnan(expected[i])) {
            BOOST_TEST(std::isnan(dx[i]), "dx[" << i << "] = " << dx[i]);
          } else {
            BOOST_TEST(dx[i] == expected[i], "dx[" << i << "] at x = " << x.to_floats()[i]);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(names_and_bad_inputs) {
  BOOST_TEST(std::string(gelu_approximation_name(GeluApproximation::none)) == "none");
  BOOST_TEST(std::string(gelu_approximation_name(GeluApproximation::tanh)) == "tanh");
  const Tensor labels = Tensor::zeros({4}, DType::i32);
  BOOST_CHECK_THROW(gelu_forward(labels, GeluApproximation::none), Error);
  BOOST_CHECK_THROW(gelu_forward(Tensor(), GeluApproximation::tanh), Error);
  const Tensor x = Tensor::zeros({2, 3}, DType::f32);
  BOOST_CHECK_THROW(gelu_backward(x, Tensor::zeros({3, 2}, DType::f32), GeluApproximation::none),
                    Error);
  BOOST_CHECK_THROW(gelu_backward(x, Tensor::zeros({2, 3}, DType::u8), GeluApproximation::none),
                    Error);
  BOOST_TEST(gelu_forward(Tensor::zeros({0}, DType::f16), GeluApproximation::none).numel() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
