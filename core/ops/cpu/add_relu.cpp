#include "core/ops/add_relu.h"

#include <algorithm>
#include <array>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Elements are widened and narrowed a block at a time through stack scratch, as in add.
constexpr std::int64_t kBlock = 1024;
using Scratch = std::array<float, kBlock>;

template <class Body>
void for_blocks(std::int64_t total, const Body& body) {
  parallel_ranges(total, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t offset = begin; offset < end; offset += kBlock) {
      body(offset, std::min(kBlock, end - offset));
    }
  });
}

}  // namespace

void add_relu_forward(const void* a, DType a_dtype, const void* b, DType b_dtype, void* y,
                      std::int64_t count) {
  for_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    Scratch a_scratch, b_scratch, y_scratch;
    const float* av = load_floats(a, a_dtype, offset, n, a_scratch.data());
    const float* bv = load_floats(b, b_dtype, offset, n, b_scratch.data());
    float* out = output_floats(y, a_dtype, offset, y_scratch.data());
    for (std::int64_t i = 0; i < n; ++i) {
      const float sum = av[i] + bv[i];
      out[i] = sum <= 0.0f ? 0.0f : sum;  // relu_forward's rule, before the one rounding
    }
    store_floats(out, y, a_dtype, offset, n);
  });
}

void add_relu_backward(const void* y, DType y_dtype, const void* dy, DType dy_dtype,
                       const void* d_main, DType d_main_dtype, void* dx, std::int64_t count) {
  for_blocks(count, [&](std::int64_t offset, std::int64_t n) {
    Scratch y_scratch, dy_scratch, main_scratch, dx_scratch;
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
