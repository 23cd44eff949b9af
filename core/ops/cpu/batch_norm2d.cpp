#include "core/ops/batch_norm2d.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Sums run in fp32 over independent lanes (which the compiler vectorises) for spans short
// enough to stay accurate; span totals are joined in double.
constexpr std::int64_t kLanes = 16;
constexpr std::int64_t kSpan = 2048;

template <class Term>
double sum_of(std::int64_t count, const Term& term) {
  double total = 0.0;
  for (std::int64_t start = 0; start < count; start += kSpan) {
    const std::int64_t end = std::min(start + kSpan, count);
    float lanes[kLanes] = {};
    std::int64_t i = start;
    for (; i + kLanes <= end; i += kLanes) {
      for (std::int64_t lane = 0; lane < kLanes; ++lane)
        lanes[lane] += term(i + lane);
    }
    for (; i < end; ++i)
      lanes[0] += term(i);
    float span = 0.0f;
    for (const float lane : lanes)
      span += lane;
    total += span;
  }
  return total;
}

// fp32 scratch for one plane of each of up to four tensors.
struct PlaneScratch {
  explicit PlaneScratch(std::int64_t plane)
      : a(static_cast<std::size_t>(plane)),
        b(static_cast<std::size_t>(plane)),
        c(static_cast<std::size_t>(plane)),
        d(static_cast<std::size_t>(plane)) {}
  std::vector<float> a, b, c, d;
};

// Calls body(index, channel, scratch) for every (n, c) plane; index = n * channels + c.
template <class Body>
void for_planes(const BatchNormGeometry& g, const Body& body) {
  parallel_ranges(g.batch * g.channels, g.plane, [&](std::int64_t begin, std::int64_t end) {
    PlaneScratch scratch(g.plane);
    for (std::int64_t index = begin; index < end; ++index)
      body(index, index % g.channels, scratch);
  });
}

// Per channel: the sum of its planes' partials in batch order, divided by `count`.
void combine(const BatchNormGeometry& g, const std::vector<double>& partial, double count,
             float* out) {
  for (std::int64_t c = 0; c < g.channels; ++c) {
    double total = 0.0;
    for (std::int64_t n = 0; n < g.batch; ++n) {
      total += partial[static_cast<std::size_t>(n * g.channels + c)];
    }
    out[c] = static_cast<float>(total / count);
  }
}

// dy's plane as fp32 (in scratch.b unless dy is f32 and unmasked), zero where the mask is not
// positive: the values relu_backward would have passed on (NaN in the mask is not positive).
const float* load_grad(const void* dy, DType dy_dtype, ReluMask mask, std::int64_t offset,
                       std::int64_t count, PlaneScratch& scratch) {
  const float* gv = load_floats(dy, dy_dtype, offset, count, scratch.b.data());
  if (mask.data == nullptr) return gv;
  const float* mv = load_floats(mask.data, mask.dtype, offset, count, scratch.d.data());
  float* out = scratch.b.data();  // may be gv itself: each element is read before it is written
  for (std::int64_t i = 0; i < count; ++i)
    out[i] = mv[i] > 0.0f ? gv[i] : 0.0f;
  return out;
}

}  // namespace

void batch_norm2d_statistics(const void* x, DType dtype, const BatchNormGeometry& g, float* mean,
                             float* variance) {
  std::vector<double> partial(static_cast<std::size_t>(g.batch * g.channels));
  const double count = static_cast<double>(g.batch * g.plane);
  for_planes(g, [&](std::int64_t index, std::int64_t, PlaneScratch& scratch) {
    const float* v = load_floats(x, dtype, index * g.plane, g.plane, scratch.a.data());
    partial[static_cast<std::size_t>(index)] =
        sum_of(g.plane, [v](std::int64_t i) { return v[i]; });
  });
  combine(g, partial, count, mean);
  // Deviations from the mean, not E[x^2] - mean^2, which cancels badly.
  for_planes(g, [&](std::int64_t index, std::int64_t channel, PlaneScratch& scratch) {
    const float* v = load_floats(x, dtype, index * g.plane, g.plane, scratch.a.data());
    const float m = mean[channel];
    partial[static_cast<std::size_t>(index)] = sum_of(g.plane, [v, m](std::int64_t i) {
      const float d = v[i] - m;
      return d * d;
    });
  });
  combine(g, partial, count, variance);
}

void batch_norm2d_affine(const void* x, void* y, DType dtype, const BatchNormGeometry& g,
                         const float* scale, const float* shift, bool relu) {
  for_planes(g, [&](std::int64_t index, std::int64_t channel, PlaneScratch& scratch) {
    const float* in = load_floats(x, dtype, index * g.plane, g.plane, scratch.a.data());
    float* out = output_floats(y, dtype, index * g.plane, scratch.b.data());
    const float s = scale[channel];
    const float t = shift[channel];
    if (relu) {
      // Rounding is monotonic and keeps signs, so relu before the one rounding gives the bits
      // of relu_forward after it (negatives and -0 to +0, NaN kept).
      for (std::int64_t i = 0; i < g.plane; ++i) {
        const float v = in[i] * s + t;
        out[i] = v <= 0.0f ? 0.0f : v;
      }
    } else {
      for (std::int64_t i = 0; i < g.plane; ++i)
        out[i] = in[i] * s + t;
    }
    store_floats(out, y, dtype, index * g.plane, g.plane);
  });
}

void batch_norm2d_backward_reduce(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                                  ReluMask mask, const BatchNormGeometry& g, const float* mean,
                                  float* sum_dy, float* sum_dy_xmu) {
  const std::size_t planes = static_cast<std::size_t>(g.batch * g.channels);
  std::vector<double> partial_dy(planes), partial_dy_xmu(planes);
  for_planes(g, [&](std::int64_t index, std::int64_t channel, PlaneScratch& scratch) {
    const float* xv = load_floats(x, x_dtype, index * g.plane, g.plane, scratch.a.data());
    const float* gv = load_grad(dy, dy_dtype, mask, index * g.plane, g.plane, scratch);
    const float m = mean[channel];
    const auto slot = static_cast<std::size_t>(index);
    partial_dy[slot] = sum_of(g.plane, [gv](std::int64_t i) { return gv[i]; });
    partial_dy_xmu[slot] =
        sum_of(g.plane, [xv, gv, m](std::int64_t i) { return gv[i] * (xv[i] - m); });
  });
  // Sums, not means: combine() divides by its count.
  combine(g, partial_dy, 1.0, sum_dy);
  combine(g, partial_dy_xmu, 1.0, sum_dy_xmu);
}

void batch_norm2d_backward_dx(const void* x, DType x_dtype, const void* dy, DType dy_dtype,
                              ReluMask mask, void* dx, const BatchNormGeometry& g,
                              const float* mean, const float* invstd, const float* weight,
                              const float* sum_dy, const float* sum_dy_xmu) {
  const float count = static_cast<float>(g.batch * g.plane);
  for_planes(g, [&](std::int64_t index, std::int64_t channel, PlaneScratch& scratch) {
    const float* xv = load_floats(x, x_dtype, index * g.plane, g.plane, scratch.a.data());
    const float* gv = load_grad(dy, dy_dtype, mask, index * g.plane, g.plane, scratch);
    float* out = output_floats(dx, x_dtype, index * g.plane, scratch.c.data());
    const float m = mean[channel];
    const float k = sum_dy_xmu[channel] * invstd[channel] * invstd[channel] / count;
    const float mean_dy = sum_dy[channel] / count;
    const float a = invstd[channel] * weight[channel];
    for (std::int64_t i = 0; i < g.plane; ++i)
      out[i] = (gv[i] - mean_dy - (xv[i] - m) * k) * a;
    store_floats(out, dx, x_dtype, index * g.plane, g.plane);
  });
}

void batch_norm2d_transpose(const void* in, void* out, std::size_t element_bytes, std::int64_t n,
                            std::int64_t a, std::int64_t b) {
  const auto* from = static_cast<const unsigned char*>(in);
  auto* to = static_cast<unsigned char*>(out);
  const auto size = static_cast<std::int64_t>(element_bytes);
  // One output row [b] (a column of the input matrix) per item: writes stay sequential.
  parallel_ranges(n * b, a, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t image = row / b;
      const std::int64_t j = row % b;
      for (std::int64_t i = 0; i < a; ++i) {
        std::memcpy(to + ((image * b + j) * a + i) * size, from + ((image * a + i) * b + j) * size,
                    element_bytes);
      }
    }
  });
}

}  // namespace alloy::cpu
