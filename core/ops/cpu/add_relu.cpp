#include "core/ops/add_relu.h"

#include "core/ops/cpu/float_block.h"

namespace alloy::cpu {

void add_relu_forward(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y,
                      std::int64_t count) {
  map_floats(a, a_dtype, b, b_dtype, y, a_dtype, count, [](float av, float bv) {
    const float sum = av + bv;
    return sum <= 0.0f ? 0.0f : sum;  // relu_forward's rule, before the one rounding
  });
}

void add_relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype,
                       const void* d_main, DType d_main_dtype, void* dx, std::int64_t count) {
  for_element_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    ElementScratch y_scratch, dy_scratch, main_scratch, dx_scratch;
    const float* yv = load_floats(y, y_dtype, offset, n, y_scratch.data());
    const float* gv = load_floats(dy, dy_dtype, offset, n, dy_scratch.data());
    const float* mv = load_floats(d_main, d_main_dtype, offset, n, main_scratch.data());
    float* out = output_floats(dx, d_main_dtype, offset, dx_scratch.data());
    // + 0.0f where masked, as add(d_main, relu_backward(y, dy)) adds relu_backward's +0.
    for (std::int64_t i = 0; i < n; ++i)
      out[i] = mv[i] + (yv[i] > 0.0f ? gv[i] : 0.0f);
    store_floats(out, dx, d_main_dtype, offset, n);
  });
}

}  // namespace alloy::cpu
