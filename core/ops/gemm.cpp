#include "core/ops/gemm.h"

#include <limits>

#include "core/ops/cpu/float_buffer.h"
#include "core/ops/dispatch.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/ops/cuda/gemm.h"
#endif

namespace alloy {

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape) {
  constexpr const char* op = "gemm";
  const Device device = common_device(op, {&a, &b, &c});
  check_floating(op, "a", a);
  check_rank(op, "a", a, 2);
  check_dtype(op, "b", b, a.dtype());
  check_rank(op, "b", b, 2);
  check_dtype(op, "c", c, a.dtype());
  const std::int64_t m = a.dim(shape.transpose_a ? 1 : 0);
  const std::int64_t k = a.dim(shape.transpose_a ? 0 : 1);
  const std::int64_t b_k = b.dim(shape.transpose_b ? 1 : 0);
  const std::int64_t n = b.dim(shape.transpose_b ? 0 : 1);
  ALLOY_CHECK(k == b_k, op, ": inner dimensions differ: op(a) is [", m, ", ", k, "] (a ", a.str(),
              ") but op(b) is [", b_k, ", ", n, "] (b ", b.str(), ")");
  check_shape(op, "c", c, {m, n});
  constexpr std::int64_t limit = std::numeric_limits<int>::max();
  ALLOY_CHECK(m <= limit && n <= limit && k <= limit, op, ": dimensions of ", a.str(), " and ",
              b.str(), " exceed the BLAS int range");
  if (device.is_cuda())
    ALLOY_CUDA_PATH(op, device, {
      cuda::gemm(cuda::context(device).cublas.get(), shape.transpose_a, shape.transpose_b,
                 static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), shape.alpha,
                 a.raw(), static_cast<int>(a.dim(1)), b.raw(), static_cast<int>(b.dim(1)),
                 a.dtype(), shape.beta, c.raw(), static_cast<int>(n), c.dtype());
      return;
    });

  const cpu::FloatInput a_float(a);
  const cpu::FloatInput b_float(b);
  cpu::FloatOutput c_float(c, shape.beta != 0.0f);
  cpu::gemm(shape.transpose_a, shape.transpose_b, static_cast<int>(m), static_cast<int>(n),
            static_cast<int>(k), shape.alpha, a_float.data(), static_cast<int>(a.dim(1)),
            b_float.data(), static_cast<int>(b.dim(1)), shape.beta, c_float.data(),
            static_cast<int>(n));
  c_float.commit();
}

}  // namespace alloy
