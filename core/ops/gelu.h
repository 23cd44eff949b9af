// GELU, as PyTorch's nn.GELU: y = x * Phi(x) with Phi the standard normal CDF (approximation
// none), or with Phi replaced by (1 + tanh u) / 2, u = sqrt(2/pi) (x + 0.044715 x^3) (tanh).
// Arithmetic in fp32, rounded once to the output's dtype. The CPU and CUDA kernels share the
// scalar functions below, so they differ only where libm's and CUDA's erfcf/expf differ (a
// few fp32 ulps). Backward needs the input, not the output.
#pragma once

#include <cmath>
#include <cstdint>

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

ALLOY_HOST_DEVICE inline float normal_cdf(float x) {
  return 0.5f * erfcf(-x * kInvSqrt2);
}

// The tanh form's u and t = exp(-2|u|).
struct TanhTerms {
  float u;
  float t;
};
ALLOY_HOST_DEVICE inline TanhTerms tanh_terms(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return {u, expf(-2.0f * fabsf(u))};
}
ALLOY_HOST_DEVICE inline float tanh_gate(TanhTerms terms) {
  return (terms.u >= 0.0f ? 1.0f : terms.t) / (1.0f + terms.t);
}
}  // namespace gelu_detail

ALLOY_HOST_DEVICE inline float gelu_value(float x, GeluApproximation approximation) {
  using namespace gelu_detail;
  const float gate =
      approximation == GeluApproximation::none ? normal_cdf(x) : tanh_gate(tanh_terms(x));
  // A zero gate is x far below 0 (x * gate is -0 there) or -inf (where it would be NaN).
  return gate == 0.0f ? -0.0f : x * gate;
}

ALLOY_HOST_DEVICE inline float gelu_derivative(float x, GeluApproximation approximation) {
  using namespace gelu_detail;
  // GELU' = gate + factor * slope. The slope underflows to 0 long before the factor overflows,
  // and is 0 at +-inf: the product is then 0 (the limit), not NaN.
  float gate, slope, factor;
  if (approximation == GeluApproximation::none) {
    gate = normal_cdf(x);
    slope = kInvSqrt2Pi * expf(-0.5f * x * x);  // phi(x)
    factor = x;
  } else {
    const TanhTerms terms = tanh_terms(x);
    gate = tanh_gate(terms);
    slope = terms.t / ((1.0f + terms.t) * (1.0f + terms.t));            // s (1 - s)
    factor = 2.0f * x * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);  // 2 x u'
  }
  return slope > 0.0f ? gate + factor * slope : gate;
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
