#include "core/ops/gelu.h"

#include "core/ops/cpu/float_block.h"

namespace alloy::cpu {

void gelu_forward(const void* x, void* y, DType dtype, GeluApproximation approximation,
                  std::int64_t count) {
  for_element_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    ElementScratch in_scratch, out_scratch;
    const float* in = load_floats(x, dtype, offset, n, in_scratch.data());
    float* out = output_floats(y, dtype, offset, out_scratch.data());
    for (std::int64_t i = 0; i < n; ++i)
      out[i] = gelu_value(in[i], approximation);
    store_floats(out, y, dtype, offset, n);
  });
}

void gelu_backward(const void* x, DType x_dtype, const void* dy, void* dx, DType dy_dtype,
                   GeluApproximation approximation, std::int64_t count) {
  map_floats(x, x_dtype, dy, dy_dtype, dx, dy_dtype, count, [approximation](float xv, float dyv) {
    return dyv * gelu_derivative(xv, approximation);
  });
}

}  // namespace alloy::cpu
