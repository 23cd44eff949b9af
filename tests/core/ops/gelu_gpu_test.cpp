// CUDA GELU against the CPU kernel. Both run core/ops/gelu.h's scalar functions (no libm), but
// nvcc contracts a * b + c into FMAs (an ulp of tanh's u becomes 2|u| <= 11 ulps of exp(-2|u|)
// for |x| <= 4; elsewhere an ulp or two). So results agree within 32 fp32 ulps, or a few ulps
// of a half output, not bit for bit; near x = -0.75, where the derivative's two terms cancel,
// within 32 fp32 ulps of dy.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "core/ops/gelu.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

namespace {
const double kFp32Ulps = 32 * std::ldexp(1.0, -24);
double tolerance(DType dtype) {
  return dtype == DType::f32 ? kFp32Ulps : gpu_tolerance(dtype);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(gelu_gpu)

BOOST_AUTO_TEST_CASE(cuda_matches_cpu_within_a_few_ulps) {
  Generator generator(21);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  for (const GeluApproximation approximation : {GeluApproximation::none, GeluApproximation::tanh}) {
    for (const DType dtype : types) {
      Tensor x = random_tensor({3, 7, 61}, dtype, generator, -4.0f, 4.0f);
      // Signed zeros, infinities, a NaN and far-out values among the inputs.
      std::vector<float> values = x.to_floats();
      const float specials[] = {-0.0f, 0.0f, INFINITY, -INFINITY, NAN, 1e4f, -1e4f, -10.5f};
      for (std::size_t i = 0; i < std::size(specials); ++i)
        values[i] = specials[i];
      x.copy_from_floats(values);
      const std::string what =
          std::string(gelu_approximation_name(approximation)) + " " + dtype_name(dtype);
      const Tensor y = gelu_forward(x, approximation);
      check_gpu_close(gelu_forward(to_cuda(x), approximation), y, "gelu_forward " + what,
                      tolerance(dtype), dtype == DType::f16 ? std::ldexp(1.0, -24) : 1e-30);
      for (const DType grad_type : types) {
        const Tensor dy = random_tensor(x.shape(), grad_type, generator);
        check_gpu_close(gelu_backward(to_cuda(x), to_cuda(dy), approximation),
                        gelu_backward(x, dy, approximation),
                        "gelu_backward " + what + "/" + dtype_name(grad_type), tolerance(grad_type),
                        kFp32Ulps);
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
