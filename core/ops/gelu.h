// GELU, as PyTorch's nn.GELU: y = x * Phi(x) with Phi the standard normal CDF (approximation
// none), or with Phi replaced by (1 + tanh u) / 2, u = sqrt(2/pi) (x + 0.044715 x^3) (tanh).
// Arithmetic in fp32, rounded once to the output's dtype. The CPU and CUDA kernels share the
// scalar functions below, plain arithmetic without libm calls or branches (so the CPU loops
// vectorise); they differ only where nvcc contracts a * b + c into an FMA (an ulp of tanh's u
// is 2|u| ulps of exp(-2|u|)). Backward needs the input, not the output.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/float_math.h"
#include "core/host_device.h"
#include "core/tensor.h"

namespace alloy {

enum class GeluApproximation { none, tanh };

// "none" or "tanh", PyTorch's spelling of the `approximate` argument.
const char* gelu_approximation_name(GeluApproximation approximation);

// The fp32 formulas. Each gate is written in a form without cancellation, so that results
// keep their relative accuracy in the negative tail (PyTorch's 1 + erf and 1 + tanh lose it):
//   none: Phi(x) = erfc(-x / sqrt 2) / 2,   GELU'(x) = Phi(x) + x phi(x),
//         phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
//   tanh: s = (1 + tanh u) / 2 = 1 / (1 + exp(-2u)), from t = exp(-2|u|) (never overflowing)
//         as 1 / (1 + t) for u >= 0 and t / (1 + t) below; s (1 - s) = t / (1 + t)^2;
//         GELU'(x) = s + 2 x u' s (1 - s),  u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2).
// Infinities give the limits: GELU(+inf) = +inf, GELU(-inf) = -0, GELU'(+inf) = 1,
// GELU'(-inf) = 0 (the plain formulas give inf * 0 = NaN there); NaN propagates.
namespace gelu_detail {
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kCubic = 0.044715f;

// -x^2 / 2 exactly, as the pair hi + lo that exp_sum takes; for |x| so large that x^2
// overflows, hi is -inf and lo 0.
struct HalfSquare {
  float hi;
  float lo;
};
ALLOY_HOST_DEVICE inline HalfSquare minus_half_square(float x) {
  const float square = x * x;
  const float error = std::fma(x, x, -square);
  return {-0.5f * square, float_select(square < INFINITY, -0.5f * error, 0.0f)};
}

// Phi(x) from erfc(|x| / sqrt 2) = t exp(-x^2 / 2 + P(t)), t = 1 / (1 + |x| / (2 sqrt 2)), with
// Numerical Recipes' erfcc fit for P (relative error below 1.2e-7 in exact arithmetic). x^2 / 2
// enters exactly, so the rounding of |x| / sqrt 2 reaches the result only through t, damped:
// Phi keeps its relative accuracy down the whole negative tail.
ALLOY_HOST_DEVICE inline float normal_cdf(float x, HalfSquare half_square) {
  const float t = 1.0f / (1.0f + 0.5f * (fabsf(x) * kInvSqrt2));
  float p = 0.17087277f;
  p = std::fma(p, t, -0.82215223f);
  p = std::fma(p, t, 1.48851587f);
  p = std::fma(p, t, -1.13520398f);
  p = std::fma(p, t, 0.27886807f);
  p = std::fma(p, t, -0.18628806f);
  p = std::fma(p, t, 0.09678418f);
  p = std::fma(p, t, 0.37409196f);
  p = std::fma(p, t, 1.00002368f);
  p = std::fma(p, t, -1.26551223f);
  const float half_erfc = 0.5f * t * exp_sum(half_square.hi, half_square.lo + p);
  return float_select(x > 0.0f, 1.0f - half_erfc, half_erfc);
}

// The tanh form's u and t = exp(-2|u|).
struct TanhTerms {
  float u;
  float t;
};
ALLOY_HOST_DEVICE inline TanhTerms tanh_terms(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return {u, exp_fp32(-2.0f * fabsf(u))};
}
ALLOY_HOST_DEVICE inline float tanh_gate(TanhTerms terms) {
  return float_select(terms.u >= 0.0f, 1.0f, terms.t) / (1.0f + terms.t);
}
}  // namespace gelu_detail

ALLOY_HOST_DEVICE inline float gelu_value(float x, GeluApproximation approximation) {
  using namespace gelu_detail;
  const float gate = approximation == GeluApproximation::none ? normal_cdf(x, minus_half_square(x))
                                                              : tanh_gate(tanh_terms(x));
  // A zero gate is x far below 0 (x * gate is -0 there) or -inf (where it would be NaN).
  return float_select(gate == 0.0f, -0.0f, x * gate);
}

ALLOY_HOST_DEVICE inline float gelu_derivative(float x, GeluApproximation approximation) {
  using namespace gelu_detail;
  // GELU' = gate + factor * slope. The slope underflows to 0 long before the factor overflows,
  // and is 0 at +-inf: the product is then 0 (the limit), not NaN.
  float gate, slope, factor;
  if (approximation == GeluApproximation::none) {
    const HalfSquare half_square = minus_half_square(x);
    gate = normal_cdf(x, half_square);
    slope = kInvSqrt2Pi * exp_sum(half_square.hi, half_square.lo);  // phi(x)
    factor = x;
  } else {
    const TanhTerms terms = tanh_terms(x);
    gate = tanh_gate(terms);
    slope = terms.t / ((1.0f + terms.t) * (1.0f + terms.t));            // s (1 - s)
    factor = 2.0f * x * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);  // 2 x u'
  }
  return float_select(slope > 0.0f, gate + factor * slope, gate);
}

// y has x's dtype.
Tensor gelu_forward(const Tensor& x, GeluApproximation approximation);
// x and dy have one shape and any floating dtypes; dx = dy * GELU'(x), in dy's dtype.
Tensor gelu_backward(const Tensor& x, const Tensor& dy, GeluApproximation approximation);

namespace cpu {
void gelu_forward(const void* x, void* y, DType dtype, GeluApproximation approximation,
                  std::int64_t count);
void gelu_backward(const void* x, DType x_dtype, const void* dy, void* dx, DType dy_dtype,
                   GeluApproximation approximation, std::int64_t count);
}  // namespace cpu

}  // namespace alloy
