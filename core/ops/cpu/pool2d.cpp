#include "core/ops/pool2d.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// The input rows (or columns) [begin, end) under output position `out`, padding clipped off.
struct Span {
  int begin, end;
};

Span window(int out, int stride, int pad, int kernel, int extent) {
  const int start = out * stride - pad;
  return {std::max(start, 0), std::min(start + kernel, extent)};
}

// Windows that tile the input without padding or overlap (LeNet's 2x2, stride 2) need no
// clipping, which lets the compiler vectorise the common case.
bool tiles_exactly(const Pool2dParams& p) {
  return p.pad_h == 0 && p.pad_w == 0 && p.stride_h == p.kernel_h && p.stride_w == p.kernel_w;
}

// LeNet's 2x2 windows at stride 2 with the kernel size known to the compiler, so the loop over a
// row vectorises: the same sums as avg_plane, in the same order (0 + a + b + c + d, which is
// not a + b + c + d when a is -0).
void avg_plane_2x2(const float* in, float* out, const Pool2dGeometry& g) {
  for (int oh = 0; oh < g.out_height; ++oh) {
    const float* __restrict top = in + 2 * oh * g.width;
    const float* __restrict bottom = top + g.width;
    float* __restrict out_row = out + oh * g.out_width;
    for (int ow = 0; ow < g.out_width; ++ow) {
      out_row[ow] =
          (0.0f + top[2 * ow] + top[2 * ow + 1] + bottom[2 * ow] + bottom[2 * ow + 1]) / 4.0f;
    }
  }
}

// The same sums as avg_plane, in the same order, for tiling windows.
void avg_plane_tiled(const float* in, float* out, const Pool2dGeometry& g) {
  const Pool2dParams& p = g.params;
  if (p.kernel_h == 2 && p.kernel_w == 2) return avg_plane_2x2(in, out, g);
  const float divisor = static_cast<float>(p.kernel_h * p.kernel_w);
  for (int oh = 0; oh < g.out_height; ++oh) {
    float* out_row = out + oh * g.out_width;
    const float* in_rows = in + oh * p.kernel_h * g.width;
    for (int ow = 0; ow < g.out_width; ++ow) {
      const float* window = in_rows + ow * p.kernel_w;
      float sum = 0.0f;
      for (int h = 0; h < p.kernel_h; ++h) {
        for (int w = 0; w < p.kernel_w; ++w)
          sum += window[h * g.width + w];
      }
      out_row[ow] = sum / divisor;
    }
  }
}

// One plane, fp32 in and out. The divisor is the full window (count_include_pad).
void avg_plane(const float* in, float* out, const Pool2dGeometry& g) {
  const Pool2dParams& p = g.params;
  if (tiles_exactly(p)) return avg_plane_tiled(in, out, g);
  const float divisor = static_cast<float>(p.kernel_h * p.kernel_w);
  for (int oh = 0; oh < g.out_height; ++oh) {
    const Span rows = window(oh, p.stride_h, p.pad_h, p.kernel_h, g.height);
    for (int ow = 0; ow < g.out_width; ++ow) {
      const Span cols = window(ow, p.stride_w, p.pad_w, p.kernel_w, g.width);
      float sum = 0.0f;
      for (int h = rows.begin; h < rows.end; ++h) {
        for (int w = cols.begin; w < cols.end; ++w)
          sum += in[h * g.width + w];
      }
      out[oh * g.out_width + ow] = sum / divisor;
    }
  }
}

// Each window adds its share in the same order every run, so the fp32 sums (rounded once by
// the caller) are deterministic.
void avg_plane_backward(const float* grad, float* result, const Pool2dGeometry& g) {
  const Pool2dParams& p = g.params;
  const float divisor = static_cast<float>(p.kernel_h * p.kernel_w);
  std::fill(result, result + std::int64_t{g.height} * g.width, 0.0f);
  if (tiles_exactly(p) && p.kernel_h == 2 && p.kernel_w == 2) {  // LeNet's: vectorises
    for (int oh = 0; oh < g.out_height; ++oh) {
      const float* __restrict shares = grad + oh * g.out_width;
      float* __restrict top = result + 2 * oh * g.width;
      float* __restrict bottom = top + g.width;
      for (int ow = 0; ow < g.out_width; ++ow) {
        const float share = shares[ow] / 4.0f;
        top[2 * ow] = top[2 * ow + 1] = bottom[2 * ow] = bottom[2 * ow + 1] = share;
      }
    }
    return;
  }
  if (tiles_exactly(p)) {  // each input under exactly one window: assign its share
    for (int oh = 0; oh < g.out_height; ++oh) {
      for (int h = 0; h < p.kernel_h; ++h) {
        float* row = result + (oh * p.kernel_h + h) * g.width;
        for (int ow = 0; ow < g.out_width; ++ow) {
          const float share = grad[oh * g.out_width + ow] / divisor;
          for (int w = 0; w < p.kernel_w; ++w)
            row[ow * p.kernel_w + w] = share;
        }
      }
    }
    return;
  }
  for (int oh = 0; oh < g.out_height; ++oh) {
    const Span rows = window(oh, p.stride_h, p.pad_h, p.kernel_h, g.height);
    for (int ow = 0; ow < g.out_width; ++ow) {
      const Span cols = window(ow, p.stride_w, p.pad_w, p.kernel_w, g.width);
      const float share = grad[oh * g.out_width + ow] / divisor;
      for (int h = rows.begin; h < rows.end; ++h) {
        for (int w = cols.begin; w < cols.end; ++w)
          result[h * g.width + w] += share;
      }
    }
  }
}

// Padding never wins (PyTorch pads max pooling with -inf), and padding of at most half the
// kernel leaves every window at least one input element.
void max_plane(const float* in, float* out, std::int32_t* index, const Pool2dGeometry& g) {
  const Pool2dParams& p = g.params;
  for (int oh = 0; oh < g.out_height; ++oh) {
    const Span rows = window(oh, p.stride_h, p.pad_h, p.kernel_h, g.height);
    for (int ow = 0; ow < g.out_width; ++ow) {
      const Span cols = window(ow, p.stride_w, p.pad_w, p.kernel_w, g.width);
      int best_index = rows.begin * g.width + cols.begin;
      float best = in[best_index];
      for (int h = rows.begin; h < rows.end; ++h) {
        for (int w = cols.begin; w < cols.end; ++w) {
          const float value = in[h * g.width + w];
          // Strictly greater keeps the first maximum; the first NaN replaces any number.
          if (value > best || (value != value && best == best)) {
            best = value;
            best_index = h * g.width + w;
          }
        }
      }
      out[oh * g.out_width + ow] = best;
      index[oh * g.out_width + ow] = best_index;
    }
  }
}

void max_plane_backward(const float* grad, const std::int32_t* index, float* result,
                        std::int64_t plane, const Pool2dGeometry& g) {
  const std::int64_t in_size = std::int64_t{g.height} * g.width;
  const std::int64_t out_size = std::int64_t{g.out_height} * g.out_width;
  std::fill(result, result + in_size, 0.0f);
  for (std::int64_t o = 0; o < out_size; ++o) {
    ALLOY_CHECK(index[o] >= 0 && index[o] < in_size, "max_pool2d_backward: argmax ", index[o],
                " at plane ", plane, " position ", o, " is outside the ", g.height, "x", g.width,
                " input plane");
    result[index[o]] += grad[o];
  }
}

// Calls body(plane, in, out) for every plane, planes split over the pool. `in` and `out` are
// fp32 scratch of one input and one output plane.
template <class Body>
void for_planes(const Pool2dGeometry& g, std::int64_t work_per_plane, const Body& body) {
  const std::int64_t in_size = std::int64_t{g.height} * g.width;
  const std::int64_t out_size = std::int64_t{g.out_height} * g.out_width;
  parallel_ranges(g.planes, work_per_plane, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> in(static_cast<std::size_t>(in_size));
    std::vector<float> out(static_cast<std::size_t>(out_size));
    for (std::int64_t plane = begin; plane < end; ++plane)
      body(plane, in.data(), out.data());
  });
}

}  // namespace

void avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& g) {
  const std::int64_t in_size = std::int64_t{g.height} * g.width;
  const std::int64_t out_size = std::int64_t{g.out_height} * g.out_width;
  const std::int64_t work = out_size * g.params.kernel_h * g.params.kernel_w;
  for_planes(g, work, [&](std::int64_t plane, float* in_scratch, float* out_scratch) {
    float* out = output_floats(y, dtype, plane * out_size, out_scratch);
    avg_plane(load_floats(x, dtype, plane * in_size, in_size, in_scratch), out, g);
    store_floats(out, y, dtype, plane * out_size, out_size);
  });
}

void avg_pool2d_backward(const void* dy, void* dx, DType dtype, const Pool2dGeometry& g) {
  const std::int64_t in_size = std::int64_t{g.height} * g.width;
  const std::int64_t out_size = std::int64_t{g.out_height} * g.out_width;
  const std::int64_t work = in_size + out_size * g.params.kernel_h * g.params.kernel_w;
  for_planes(g, work, [&](std::int64_t plane, float* in_scratch, float* out_scratch) {
    float* result = output_floats(dx, dtype, plane * in_size, in_scratch);
    avg_plane_backward(load_floats(dy, dtype, plane * out_size, out_size, out_scratch), result, g);
    store_floats(result, dx, dtype, plane * in_size, in_size);
  });
}

// ReLU on widened values: negatives and -0 become +0, NaN stays, as relu_forward does on the
// stored values (widening is exact, so the order does not matter).
void relu_avg_pool2d_forward(const void* x, void* y, DType dtype, const Pool2dGeometry& g) {
  const std::int64_t in_size = std::int64_t{g.height} * g.width;
  const std::int64_t out_size = std::int64_t{g.out_height} * g.out_width;
  parallel_ranges(g.planes, 4 * out_size, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> in(static_cast<std::size_t>(in_size));
    std::vector<float> scratch(static_cast<std::size_t>(out_size));
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const float* values = load_floats(x, dtype, plane * in_size, in_size, in.data());
      if (values != in.data()) std::copy(values, values + in_size, in.begin());
      for (float& value : in)
        value = value <= 0.0f ? 0.0f : value;
      float* out = output_floats(y, dtype, plane * out_size, scratch.data());
      avg_plane_2x2(in.data(), out, g);
      store_floats(out, y, dtype, plane * out_size, out_size);
    }
  });
}

// The pool's share (dy / 4, rounded to dy's dtype, zero under no window) where x > 0, else +0:
// avg_pool2d_backward's dx, then relu_backward's selection.
void relu_avg_pool2d_backward(const void* x, DType x_dtype, const void* dy, void* dx,
                              DType dy_dtype, const Pool2dGeometry& g) {
  const std::int64_t in_size = std::int64_t{g.height} * g.width;
  const std::int64_t out_size = std::int64_t{g.out_height} * g.out_width;
  parallel_ranges(g.planes, 2 * in_size, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> inputs(static_cast<std::size_t>(in_size));
    std::vector<float> grads(static_cast<std::size_t>(out_size));
    std::vector<float> scratch(static_cast<std::size_t>(in_size));
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const float* input = load_floats(x, x_dtype, plane * in_size, in_size, inputs.data());
      const float* grad = load_floats(dy, dy_dtype, plane * out_size, out_size, grads.data());
      float* result = output_floats(dx, dy_dtype, plane * in_size, scratch.data());
      avg_plane_backward(grad, result, g);
      // The share is rounded to dy's dtype by the pool before ReLU selects it: selecting the
      // fp32 share and rounding after gives the same bits (+0 rounds to +0).
      for (std::int64_t i = 0; i < in_size; ++i)
        result[i] = input[i] > 0.0f ? result[i] : 0.0f;
      store_floats(result, dx, dy_dtype, plane * in_size, in_size);
    }
  });
}

void max_pool2d_forward(const void* x, void* y, std::int32_t* argmax, DType dtype,
                        const Pool2dGeometry& g) {
  const std::int64_t in_size = std::int64_t{g.height} * g.width;
  const std::int64_t out_size = std::int64_t{g.out_height} * g.out_width;
  const std::int64_t work = out_size * g.params.kernel_h * g.params.kernel_w;
  for_planes(g, work, [&](std::int64_t plane, float* in_scratch, float* out_scratch) {
    float* out = output_floats(y, dtype, plane * out_size, out_scratch);
    max_plane(load_floats(x, dtype, plane * in_size, in_size, in_scratch), out,
              argmax + plane * out_size, g);
    // Every output is an input value, so narrowing it back is exact.
    store_floats(out, y, dtype, plane * out_size, out_size);
  });
}

void max_pool2d_backward(const void* dy, const std::int32_t* argmax, void* dx, DType dtype,
                         const Pool2dGeometry& g) {
  const std::int64_t in_size = std::int64_t{g.height} * g.width;
  const std::int64_t out_size = std::int64_t{g.out_height} * g.out_width;
  for_planes(g, in_size + out_size, [&](std::int64_t plane, float* in_scratch, float* out_scratch) {
    float* result = output_floats(dx, dtype, plane * in_size, in_scratch);
    max_plane_backward(load_floats(dy, dtype, plane * out_size, out_size, out_scratch),
                       argmax + plane * out_size, result, plane, g);
    store_floats(result, dx, dtype, plane * in_size, in_size);
  });
}

}  // namespace alloy::cpu
