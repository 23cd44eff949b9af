#include "core/ops/gelu.h"

#include "core/ops/cpu/float_block.h"

namespace alloy::cpu {

namespace {

// The fp32 loops over one block. The approximation is a template argument so that each loop
// body is branch-free arithmetic (gelu.h's functions call no libm), which GCC vectorises.
template <GeluApproximation approximation>
[[gnu::always_inline]] inline void forward_loop(const float* x, float* y, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    y[i] = gelu_value(x[i], approximation);
}

template <GeluApproximation approximation>
[[gnu::always_inline]] inline void backward_loop(const float* x, const float* dy, float* dx,
                                                 std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i)
    dx[i] = dy[i] * gelu_derivative(x[i], approximation);
}

[[gnu::always_inline]] inline void forward_block(const float* x, float* y, std::int64_t count,
                                                 GeluApproximation approximation) {
  if (approximation == GeluApproximation::none) {
    forward_loop<GeluApproximation::none>(x, y, count);
  } else {
    forward_loop<GeluApproximation::tanh>(x, y, count);
  }
}

[[gnu::always_inline]] inline void backward_block(const float* x, const float* dy, float* dx,
                                                  std::int64_t count,
                                                  GeluApproximation approximation) {
  if (approximation == GeluApproximation::none) {
    backward_loop<GeluApproximation::none>(x, dy, dx, count);
  } else {
    backward_loop<GeluApproximation::tanh>(x, dy, dx, count);
  }
}

#if defined(__x86_64__) && !defined(__FMA__)
// Compiled without FMA (ALLOY_NATIVE=OFF), each std::fma is a libm call, which is slow and stops
// the vectorisation; these copies have the instruction and run where the CPU has it. fma rounds
// once in either form, so the choice changes no bits, only the speed.
__attribute__((target("avx2,fma"))) void forward_block_fma(const float* x, float* y,
                                                           std::int64_t count,
                                                           GeluApproximation approximation) {
  forward_block(x, y, count, approximation);
}

__attribute__((target("avx2,fma"))) void backward_block_fma(const float* x, const float* dy,
                                                            float* dx, std::int64_t count,
                                                            GeluApproximation approximation) {
  backward_block(x, dy, dx, count, approximation);
}

bool cpu_has_fma() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}
#endif

void forward_floats(const float* x, float* y, std::int64_t count, GeluApproximation approximation) {
#if defined(__x86_64__) && !defined(__FMA__)
  if (cpu_has_fma()) return forward_block_fma(x, y, count, approximation);
#endif
  forward_block(x, y, count, approximation);
}

void backward_floats(const float* x, const float* dy, float* dx, std::int64_t count,
                     GeluApproximation approximation) {
#if defined(__x86_64__) && !defined(__FMA__)
  if (cpu_has_fma()) return backward_block_fma(x, dy, dx, count, approximation);
#endif
  backward_block(x, dy, dx, count, approximation);
}

}  // namespace

void gelu_forward(const void* x, void* y, DType dtype, GeluApproximation approximation,
                  std::int64_t count) {
  for_element_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    ElementScratch in_scratch, out_scratch;
    const float* in = load_floats(x, dtype, offset, n, in_scratch.data());
    float* out = output_floats(y, dtype, offset, out_scratch.data());
    forward_floats(in, out, n, approximation);
    store_floats(out, y, dtype, offset, n);
  });
}

void gelu_backward(const void* x, DType x_dtype, const void* dy, void* dx, DType dy_dtype,
                   GeluApproximation approximation, std::int64_t count) {
  for_element_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    ElementScratch x_scratch, dy_scratch, dx_scratch;
    const float* xv = load_floats(x, x_dtype, offset, n, x_scratch.data());
    const float* dyv = load_floats(dy, dy_dtype, offset, n, dy_scratch.data());
    float* out = output_floats(dx, dy_dtype, offset, dx_scratch.data());
    backward_floats(xv, dyv, out, n, approximation);
    store_floats(out, dx, dy_dtype, offset, n);
  });
}

}  // namespace alloy::cpu
