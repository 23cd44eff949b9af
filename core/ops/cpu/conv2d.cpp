#include "core/ops/conv2d.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <vector>

#include "core/ops/cpu/conv2d_winograd.h"
#include "core/ops/cpu/conv2d_winograd_5x5.h"
#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/lane_sum.h"
#include "core/ops/cpu/thread_scratch.h"
#include "core/ops/gemm.h"
#include "core/thread_pool.h"

namespace alloy::cpu {

namespace {

using Index = std::int64_t;

Index floor_div(Index numerator, Index denominator) {
  return numerator >= 0 ? numerator / denominator : -((-numerator + denominator - 1) / denominator);
}

// Rows of LeNet's column matrices are 9 wide, where a memmove call per row costs more than the
// copy; blocks of 8 compile to single vector moves instead.
inline void copy_row(const float* __restrict source, float* __restrict target, Index count) {
  Index i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int j = 0; j < 8; ++j)
      target[i + j] = source[i + j];
  }
  for (; i < count; ++i)
    target[i] = source[i];
}

inline void add_row(const float* __restrict source, float* __restrict target, Index count) {
  Index i = 0;
  for (; i + 8 <= count; i += 8) {
    for (int j = 0; j < 8; ++j)
      target[i + j] += source[i + j];
  }
  for (; i < count; ++i)
    target[i] += source[i];
}

struct Range {
  Index first = 0, last = 0;
};

// The outputs [first, last) along one axis whose input position out * stride - pad + offset
// lies inside [0, extent_in).
Range valid_range(Index extent_out, Index extent_in, int stride, int pad, int offset) {
  const Index first =
      std::clamp<Index>(floor_div(pad - offset + stride - 1, stride), 0, extent_out);
  const Index last =
      std::clamp<Index>(floor_div(extent_in - 1 + pad - offset, stride) + 1, first, extent_out);
  return {first, last};
}

// The column matrix of one image has a row per (c, r, s) and a column per output pixel (p, q),
// holding x[c, p * stride_h - pad_h + r, q * stride_w - pad_w + s], or 0 in the padding.
// Unfold computes the in-image output ranges of each kernel row and column once per call.
class Unfold {
 public:
  explicit Unfold(const Conv2dGeometry& g) : g_(g) {
    for (int r = 0; r < g.kernel_h; ++r) {
      rows_.push_back(valid_range(g.out_h, g.height, g.params.stride_h, g.params.pad_h, r));
    }
    for (int s = 0; s < g.kernel_w; ++s) {
      columns_.push_back(valid_range(g.out_w, g.width, g.params.stride_w, g.params.pad_w, s));
    }
  }

  // Writes the column matrix of `image`, row stride ld.
  void im2col(const float* image, float* cols, Index ld) const {
    const Index out_w = g_.out_w;
    const Index pixels = g_.out_h * out_w;
    for (Index c = 0; c < g_.channels; ++c) {
      const float* plane = image + c * g_.height * g_.width;
      for (int r = 0; r < g_.kernel_h; ++r) {
        const Range rows = rows_[r];
        for (int s = 0; s < g_.kernel_w; ++s) {
          const Range columns = columns_[s];
          float* row = cols + ((c * g_.kernel_h + r) * g_.kernel_w + s) * ld;
          std::fill(row, row + rows.first * out_w, 0.0f);
          for (Index p = rows.first; p < rows.last; ++p) {
            float* out = row + p * out_w;
            std::fill(out, out + columns.first, 0.0f);
            const float* in = plane + input_offset(p, r, columns.first, s);
            if (g_.params.stride_w == 1) {
              copy_row(in, out + columns.first, columns.last - columns.first);
            } else {
              for (Index q = columns.first; q < columns.last; ++q) {
                out[q] = in[(q - columns.first) * g_.params.stride_w];
              }
            }
            std::fill(out + columns.last, out + out_w, 0.0f);
          }
          std::fill(row + rows.last * out_w, row + pixels, 0.0f);
        }
      }
    }
  }

  // The adjoint of im2col: adds each entry of `cols` into the image element it was read from.
  void col2im(const float* cols, Index ld, float* image) const {
    const Index out_w = g_.out_w;
    for (Index c = 0; c < g_.channels; ++c) {
      float* plane = image + c * g_.height * g_.width;
      for (int r = 0; r < g_.kernel_h; ++r) {
        const Range rows = rows_[r];
        for (int s = 0; s < g_.kernel_w; ++s) {
          const Range columns = columns_[s];
          const float* row = cols + ((c * g_.kernel_h + r) * g_.kernel_w + s) * ld;
          for (Index p = rows.first; p < rows.last; ++p) {
            const float* in = row + p * out_w + columns.first;
            float* out = plane + input_offset(p, r, columns.first, s);
            if (g_.params.stride_w == 1) {
              add_row(in, out, columns.last - columns.first);
            } else {
              for (Index q = 0; q < columns.last - columns.first; ++q) {
                out[q * g_.params.stride_w] += in[q];
              }
            }
          }
        }
      }
    }
  }

 private:
  // Offset within a channel plane of the input that output (p, q) reads through tap (r, s).
  Index input_offset(Index p, int r, Index q, int s) const {
    return (p * g_.params.stride_h - g_.params.pad_h + r) * static_cast<Index>(g_.width) +
           q * g_.params.stride_w - g_.params.pad_w + s;
  }

  const Conv2dGeometry& g_;
  std::vector<Range> rows_, columns_;
};

// How many images share one GEMM: one, unless the images are so small that the GEMM would be
// too narrow for the BLAS kernel. Per-image GEMMs keep the column matrix in cache and run as
// fast as wider ones on LeNet's shapes.
Index images_per_gemm(const Conv2dGeometry& g) {
  constexpr Index min_columns = 64;
  const Index pixels = static_cast<Index>(g.out_h) * g.out_w;
  return std::clamp<Index>((min_columns + pixels - 1) / pixels, 1, g.batch);
}

// Elements [offset, offset + count) of typed storage as fp32 in `target`, always copied.
void widen_into(const void* data, DType dtype, Index offset, Index count, float* target) {
  const float* values = load_floats(data, dtype, offset, count, target);
  if (values != target) std::copy(values, values + count, target);
}

}  // namespace

// Half tensors are widened and narrowed one image at a time in per-thread scratch, so half
// storage never costs a whole-tensor fp32 copy (the point of O2's memory saving).
void conv2d_im2col_forward(const Conv2dGeometry& g, const void* x, const float* w, const float* b,
                           void* y, DType dtype) {
  const bool widened = dtype != DType::f32;
  const Unfold unfold(g);
  const Index patch = static_cast<Index>(g.channels) * g.kernel_h * g.kernel_w;
  const Index pixels = static_cast<Index>(g.out_h) * g.out_w;
  const Index image = static_cast<Index>(g.channels) * g.height * g.width;
  const Index output = g.filters * pixels;
  const Index group = images_per_gemm(g);
  const bool scatter = group > 1 || widened;
  const ThreadScratch scratch(
      (patch + (scatter ? g.filters : 0)) * group * pixels + (widened ? image : 0), false);
  // Packed once for every group's product, not once per product.
  const GemmLeft weights(false, g.filters, static_cast<int>(patch), w, static_cast<int>(patch));
  cpu_pool().parallel_for(g.batch, [&](Index begin, Index end, int chunk) {
    float* cols = scratch.slice(chunk);
    float* product = cols + patch * group * pixels;
    float* x_image = product + (scatter ? g.filters * group * pixels : 0);
    for (Index first = begin; first < end; first += group) {
      const Index count = std::min(group, end - first);
      const Index ld = count * pixels;
      for (Index i = 0; i < count; ++i) {
        unfold.im2col(load_floats(x, dtype, (first + i) * image, image, x_image), cols + i * pixels,
                      ld);
      }
      // One fp32 image's product is its output; otherwise it is [K, count * P * Q] and gets
      // scattered (and rounded) into the images' outputs.
      float* target = scatter ? product : static_cast<float*>(y) + first * output;
      if (b != nullptr) {
        for (Index k = 0; k < g.filters; ++k)
          std::fill(target + k * ld, target + (k + 1) * ld, b[k]);
      }
      gemm_serial(weights, false, static_cast<int>(ld), 1.0f, cols, static_cast<int>(ld),
                  b != nullptr ? 1.0f : 0.0f, target, static_cast<int>(ld));
      if (!scatter) continue;
      for (Index i = 0; i < count; ++i) {
        for (Index k = 0; k < g.filters; ++k) {
          store_floats(product + k * ld + i * pixels, y, dtype, (first + i) * output + k * pixels,
                       pixels);
        }
      }
    }
  });
}

void conv2d_im2col_backward(const Conv2dGeometry& g, const void* x, const float* w, const void* dy,
                            float* dw, float* db, void* dx, DType dtype) {
  const bool widened = dtype != DType::f32;
  const Unfold unfold(g);
  const Index patch = static_cast<Index>(g.channels) * g.kernel_h * g.kernel_w;
  const Index pixels = static_cast<Index>(g.out_h) * g.out_w;
  const Index image = static_cast<Index>(g.channels) * g.height * g.width;
  const Index output = g.filters * pixels;
  const Index group = images_per_gemm(g);
  const bool gather = group > 1 || widened;
  const ThreadScratch scratch(
      (patch * (dx != nullptr ? 2 : 1) + (gather ? g.filters : 0)) * group * pixels +
          (widened ? image : 0),
      false);
  // Each chunk sums its images' dw and db in its own slice; the slices are added in chunk
  // order afterwards, so the result depends only on the thread count.
  const Index partial_size = g.filters * patch + g.filters;
  const ThreadScratch partials(partial_size, true);
  // w^T, packed once for every group's data gradient.
  std::optional<GemmLeft> weights_t;
  if (dx != nullptr)
    weights_t.emplace(true, static_cast<int>(patch), g.filters, w, static_cast<int>(patch));
  cpu_pool().parallel_for(g.batch, [&](Index begin, Index end, int chunk) {
    float* cols = scratch.slice(chunk);
    float* dcols = cols + patch * group * pixels;
    float* dy_group = dcols + (dx != nullptr ? patch * group * pixels : 0);
    float* image_scratch = dy_group + (gather ? g.filters * group * pixels : 0);
    float* dw_partial = partials.slice(chunk);
    float* db_partial = dw_partial + g.filters * patch;
    for (Index first = begin; first < end; first += group) {
      const Index count = std::min(group, end - first);
      const Index ld = count * pixels;
      // dy of the group as one fp32 [K, count * P * Q] matrix; one fp32 image's dy already is.
      const float* dy_block = gather ? dy_group : static_cast<const float*>(dy) + first * output;
      for (Index i = 0; i < count; ++i) {
        unfold.im2col(load_floats(x, dtype, (first + i) * image, image, image_scratch),
                      cols + i * pixels, ld);
        if (!gather) continue;
        for (Index k = 0; k < g.filters; ++k) {
          widen_into(dy, dtype, (first + i) * output + k * pixels, pixels,
                     dy_group + k * ld + i * pixels);
        }
      }
      gemm_serial(false, true, g.filters, static_cast<int>(patch), static_cast<int>(ld), 1.0f,
                  dy_block, static_cast<int>(ld), cols, static_cast<int>(ld), 1.0f, dw_partial,
                  static_cast<int>(patch));
      if (db != nullptr) {
        for (Index k = 0; k < g.filters; ++k)
          db_partial[k] += lane_sum(dy_block + k * ld, ld);
      }
      if (dx == nullptr) continue;
      gemm_serial(*weights_t, false, static_cast<int>(ld), 1.0f, dy_block, static_cast<int>(ld),
                  0.0f, dcols, static_cast<int>(ld));
      for (Index i = 0; i < count; ++i) {
        float* target = output_floats(dx, dtype, (first + i) * image, image_scratch);
        std::fill(target, target + image, 0.0f);
        unfold.col2im(dcols + i * pixels, ld, target);
        store_floats(target, dx, dtype, (first + i) * image, image);
      }
    }
  });
  // Each element's sum runs in chunk order whichever thread adds it (a 512 x 2304 layer's dw
  // is 1.2 M elements per chunk: on one thread the sum took a fifth of that layer's backward).
  const int threads = cpu_threads();
  const Index sums = db != nullptr ? partial_size : g.filters * patch;
  cpu_pool().parallel_for(sums, [&](Index begin, Index end, int) {
    for (Index j = begin; j < end; ++j) {
      float sum = partials.slice(0)[j];
      for (int chunk = 1; chunk < threads; ++chunk)
        sum += partials.slice(chunk)[j];
      if (j < g.filters * patch) {
        dw[j] += sum;
      } else {
        db[j - g.filters * patch] += sum;
      }
    }
  });
}

void conv2d_forward(const Conv2dGeometry& g, const void* x, const float* w, const float* b, void* y,
                    DType dtype) {
  if (winograd_preferred(g)) {
    conv2d_winograd_forward(g, x, w, b, y, dtype);
  } else if (winograd_5x5_preferred(g)) {
    conv2d_winograd_5x5_forward(g, x, w, b, y, dtype);
  } else {
    conv2d_im2col_forward(g, x, w, b, y, dtype);
  }
}

void conv2d_backward(const Conv2dGeometry& g, const void* x, const float* w, const void* dy,
                     float* dw, float* db, void* dx, DType dtype) {
  if (winograd_preferred(g)) {
    conv2d_winograd_backward(g, x, w, dy, dw, db, dx, dtype);
  } else if (winograd_5x5_preferred(g)) {
    conv2d_winograd_5x5_backward(g, x, w, dy, dw, db, dx, dtype);
  } else {
    conv2d_im2col_backward(g, x, w, dy, dw, db, dx, dtype);
  }
}

}  // namespace alloy::cpu
