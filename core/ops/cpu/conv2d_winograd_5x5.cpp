#include "core/ops/cpu/conv2d_winograd_5x5.h"

#include <algorithm>
#include <cstdint>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/float_lanes.h"
#include "core/ops/cpu/lane_sum.h"
#include "core/ops/cpu/thread_scratch.h"
#include "core/ops/gemm.h"
#include "core/thread_pool.h"

namespace alloy::cpu {

namespace {

using Index = std::int64_t;

constexpr int kWindow = 6;  // a tile's input window, and its transform: 6x6 points
constexpr int kPoints = kWindow * kWindow;
constexpr int kTaps = 5;

// The Toom-Cook matrices of F(2, 5) at the points 0, 1, -1, 2, -2 and infinity: A^T evaluates
// the 2 outputs, G the filter (scaled by the points' Lagrange denominators), and B^T is the
// unique matrix that then makes A^T [(G g) .* (B^T d)] the correlation of d and g (derived in
// exact rational arithmetic; conv2d_winograd_5x5_test checks the results against float64).
constexpr float kBT[kWindow][kWindow] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0},
                                         {0, 4, -4, -1, 1, 0}, {0, -2, -1, 2, 1, 0},
                                         {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
constexpr double kG[kWindow][kTaps] = {{1.0 / 4, 0, 0, 0, 0},
                                       {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
                                       {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
                                       {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
                                       {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
                                       {0, 0, 0, 0, 1}};
constexpr float kAT[2][kWindow] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}};

// Sixteen floats in vector lanes, one image each (float_lanes.h: one AVX-512 register, or two
// AVX ones).
constexpr int kLanes = 16;
using Lanes = FloatLanes16;
static_assert(sizeof(Lanes) == kLanes * sizeof(float), "a vector of kLanes floats");

Lanes load(const float* p) {
  return load_lanes<Lanes>(p);
}

void store(float* p, Lanes v) {
  store_lanes(p, v);
}

// sum over i < N of coefficient(i) * value(i), the zero coefficients of the constant matrices
// skipped (the loop unrolls and the tests fold).
template <int N, class Coefficient, class Value>
Lanes weighted_sum(Coefficient coefficient, Value value) {
  Lanes sum = {};
#pragma GCC unroll 6
  for (int i = 0; i < N; ++i) {
    const float c = coefficient(i);
    if (c != 0.0f) sum += c * value(i);
  }
  return sum;
}

// The sizes of one call: 2x2 output tiles, and a block's planes, padded so that every tile's
// window lies inside (padded row 2i .. 2i + 5 for tile row i; the image at (pad_h, pad_w)).
struct Plan {
  explicit Plan(const Conv2dGeometry& g)
      : g(g),
        tile_rows((g.out_h + 1) / 2),
        tile_columns((g.out_w + 1) / 2),
        per_image(tile_rows * tile_columns),
        tiles(per_image * kLanes),
        padded_h(2 * tile_rows + 4),
        padded_w(2 * tile_columns + 4),
        image(static_cast<Index>(g.channels) * g.height * g.width),
        output(static_cast<Index>(g.filters) * g.out_h * g.out_w) {}

  // Floats of each per-thread buffer.
  Index padded_floats() const { return g.channels * padded_h * padded_w * kLanes; }
  Index v_floats() const { return kPoints * g.channels * tiles; }
  Index m_floats() const { return kPoints * g.filters * tiles; }
  Index y_floats() const { return output * kLanes; }

  const Conv2dGeometry& g;
  Index tile_rows, tile_columns, per_image, tiles;
  Index padded_h, padded_w;
  Index image, output;
};

// U[point][k][c] = G w[k][c] G^T, in double and rounded once.
Tensor transform_filters(const Conv2dGeometry& g, const float* w) {
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  Tensor u = Tensor::empty({kPoints * pairs}, DType::f32, Device::cpu(), MemoryCategory::workspace);
  float* out = u.data<float>();
  cpu_pool().parallel_for(pairs, [&](Index begin, Index end, int) {
    for (Index pair = begin; pair < end; ++pair) {
      const float* taps = w + pair * kTaps * kTaps;
      double rows[kWindow][kTaps] = {};  // G g
      for (int a = 0; a < kWindow; ++a) {
        for (int s = 0; s < kTaps; ++s) {
          for (int r = 0; r < kTaps; ++r)
            rows[a][s] += kG[a][r] * taps[r * kTaps + s];
        }
      }
      for (int a = 0; a < kWindow; ++a) {
        for (int b = 0; b < kWindow; ++b) {
          double sum = 0.0;
          for (int s = 0; s < kTaps; ++s)
            sum += rows[a][s] * kG[b][s];
          out[(a * kWindow + b) * pairs + pair] = static_cast<float>(sum);
        }
      }
    }
  });
  return u;
}

// The block's images [first, first + count) into the padded planes, image n in lane n:
// padded[(c * padded_h + h + pad_h) * padded_w + w + pad_w][n] = x[first + n][c][h][w]. The
// padding, written by no one, stays as the thread zeroed it. A partial block zeroes the planes
// first: its unused lanes would otherwise keep an earlier block's images, which the filter
// gradient's GEMMs, summing over every lane, would add in (0 * inf is NaN).
void transpose_in(const Plan& p, const void* x, DType dtype, Index first, Index count,
                  float* padded, float* image_scratch) {
  const Conv2dGeometry& g = p.g;
  if (count < kLanes) std::fill(padded, padded + p.padded_floats(), 0.0f);
  for (Index n = 0; n < count; ++n) {
    const float* in = load_floats(x, dtype, (first + n) * p.image, p.image, image_scratch);
    for (Index c = 0; c < g.channels; ++c) {
      for (Index h = 0; h < g.height; ++h) {
        float* row =
            padded +
            ((c * p.padded_h + h + g.params.pad_h) * p.padded_w + g.params.pad_w) * kLanes + n;
        const float* source = in + (c * g.height + h) * g.width;
        for (Index w = 0; w < g.width; ++w)
          row[w * kLanes] = source[w];
      }
    }
  }
}

// V[point][c][tile lanes] = B^T d B for every tile of every channel.
void transform_inputs(const Plan& p, const float* padded, float* v) {
  const Index channels = p.g.channels;
  for (Index c = 0; c < channels; ++c) {
    const float* plane = padded + c * p.padded_h * p.padded_w * kLanes;
    for (Index i = 0; i < p.tile_rows; ++i) {
      for (Index j = 0; j < p.tile_columns; ++j) {
        const float* corner = plane + (2 * i * p.padded_w + 2 * j) * kLanes;
        Lanes d[kWindow][kWindow];
        for (int r = 0; r < kWindow; ++r) {
          for (int s = 0; s < kWindow; ++s)
            d[r][s] = load(corner + (r * p.padded_w + s) * kLanes);
        }
        Lanes rows[kWindow][kWindow];  // B^T d
#pragma GCC unroll 6
        for (int a = 0; a < kWindow; ++a) {
#pragma GCC unroll 6
          for (int s = 0; s < kWindow; ++s) {
            const Lanes sum = weighted_sum<kWindow>([&](int r) { return kBT[a][r]; },
                                                    [&](int r) { return d[r][s]; });
            rows[a][s] = sum;
          }
        }
        float* out = v + (c * p.per_image + i * p.tile_columns + j) * kLanes;
#pragma GCC unroll 6
        for (int a = 0; a < kWindow; ++a) {
#pragma GCC unroll 6
          for (int b = 0; b < kWindow; ++b) {
            const Lanes sum = weighted_sum<kWindow>([&](int s) { return kBT[b][s]; },
                                                    [&](int s) { return rows[a][s]; });
            store(out + (a * kWindow + b) * channels * p.tiles, sum);
          }
        }
      }
    }
  }
}

// The outputs of every filter from M[point][k][tile lanes]: A^T m A + bias, into the block's
// transposed output y_lanes[(k * out_h + row) * out_w + column][n].
void transform_outputs(const Plan& p, const float* m, const float* bias, float* y_lanes) {
  const Conv2dGeometry& g = p.g;
  const Index filters = g.filters;
  for (Index k = 0; k < filters; ++k) {
    const Lanes b = Lanes{} + (bias != nullptr ? bias[k] : 0.0f);
    for (Index i = 0; i < p.tile_rows; ++i) {
      for (Index j = 0; j < p.tile_columns; ++j) {
        const float* tile = m + (k * p.per_image + i * p.tile_columns + j) * kLanes;
        Lanes rows[2][kWindow];  // A^T m
#pragma GCC unroll 6
        for (int v = 0; v < kWindow; ++v) {
          Lanes point[kWindow];
#pragma GCC unroll 6
          for (int u = 0; u < kWindow; ++u)
            point[u] = load(tile + (u * kWindow + v) * filters * p.tiles);
#pragma GCC unroll 2
          for (int a = 0; a < 2; ++a) {
            const Lanes sum = weighted_sum<kWindow>([&](int u) { return kAT[a][u]; },
                                                    [&](int u) { return point[u]; });
            rows[a][v] = sum;
          }
        }
        for (int a = 0; a < 2; ++a) {
          const Index row = 2 * i + a;
          if (row >= g.out_h) break;
          for (int c = 0; c < 2; ++c) {
            const Index column = 2 * j + c;
            if (column >= g.out_w) break;
            const Lanes sum = weighted_sum<kWindow>([&](int v) { return kAT[c][v]; },
                                                    [&](int v) { return rows[a][v]; });
            store(y_lanes + ((k * g.out_h + row) * g.out_w + column) * kLanes, sum + b);
          }
        }
      }
    }
  }
}

// The block's outputs out of their lanes into y, rounded once to `dtype`.
void transpose_out(const Plan& p, const float* y_lanes, Index first, Index count, void* y,
                   DType dtype, float* output_scratch) {
  for (Index n = 0; n < count; ++n) {
    float* out = output_floats(y, dtype, (first + n) * p.output, output_scratch);
    for (Index i = 0; i < p.output; ++i)
      out[i] = y_lanes[i * kLanes + n];
    store_floats(out, y, dtype, (first + n) * p.output, p.output);
  }
}

// The block's dy into lanes: dy_lanes[(k * out_h + row) * out_w + column][n]; a partial
// block's unused lanes zero, so that they add nothing to the filter gradient. With db_partial,
// each image's plane sums are added there too, while the image is at hand.
void transpose_gradient_in(const Plan& p, const void* dy, DType dtype, Index first, Index count,
                           float* dy_lanes, float* output_scratch, float* db_partial) {
  if (count < kLanes) std::fill(dy_lanes, dy_lanes + p.y_floats(), 0.0f);
  const Index plane = static_cast<Index>(p.g.out_h) * p.g.out_w;
  for (Index n = 0; n < count; ++n) {
    const float* in = load_floats(dy, dtype, (first + n) * p.output, p.output, output_scratch);
    for (Index i = 0; i < p.output; ++i)
      dy_lanes[i * kLanes + n] = in[i];
    if (db_partial == nullptr) continue;
    for (Index k = 0; k < p.g.filters; ++k)
      db_partial[k] += lane_sum(in + k * plane, plane);
  }
}

// Yh[point][k][tile lanes] = A dY A^T for every tile of every filter (the adjoint of
// transform_outputs); outputs past the plane's edge count as zero.
void transform_gradients(const Plan& p, const float* dy_lanes, float* yh) {
  const Conv2dGeometry& g = p.g;
  const Index filters = g.filters;
  for (Index k = 0; k < filters; ++k) {
    for (Index i = 0; i < p.tile_rows; ++i) {
      for (Index j = 0; j < p.tile_columns; ++j) {
        Lanes dy[2][2];
        for (int a = 0; a < 2; ++a) {
          for (int c = 0; c < 2; ++c) {
            const Index row = 2 * i + a, column = 2 * j + c;
            dy[a][c] = row < g.out_h && column < g.out_w
                           ? load(dy_lanes + ((k * g.out_h + row) * g.out_w + column) * kLanes)
                           : Lanes{};
          }
        }
        Lanes rows[2][kWindow];  // dY A^T... per output row: rows[a][v] = sum_c dy[a][c] A^T[c][v]
#pragma GCC unroll 2
        for (int a = 0; a < 2; ++a) {
#pragma GCC unroll 6
          for (int v = 0; v < kWindow; ++v) {
            const Lanes sum =
                weighted_sum<2>([&](int c) { return kAT[c][v]; }, [&](int c) { return dy[a][c]; });
            rows[a][v] = sum;
          }
        }
        float* out = yh + (k * p.per_image + i * p.tile_columns + j) * kLanes;
#pragma GCC unroll 6
        for (int u = 0; u < kWindow; ++u) {
#pragma GCC unroll 6
          for (int v = 0; v < kWindow; ++v) {
            const Lanes sum = weighted_sum<2>([&](int a) { return kAT[a][u]; },
                                              [&](int a) { return rows[a][v]; });
            store(out + (u * kWindow + v) * filters * p.tiles, sum);
          }
        }
      }
    }
  }
}

// The adjoint of transform_inputs: B dV B^T per tile, added into the padded planes of dx
// (overlapping windows, in tile order), which must start zeroed.
void transform_inputs_adjoint(const Plan& p, const float* dv, float* padded) {
  const Index channels = p.g.channels;
  for (Index c = 0; c < channels; ++c) {
    float* plane = padded + c * p.padded_h * p.padded_w * kLanes;
    for (Index i = 0; i < p.tile_rows; ++i) {
      for (Index j = 0; j < p.tile_columns; ++j) {
        const float* in = dv + (c * p.per_image + i * p.tile_columns + j) * kLanes;
        Lanes rows[kWindow][kWindow];  // B dV, row r: sum_a B^T[a][r] dV[a][b]
#pragma GCC unroll 6
        for (int b = 0; b < kWindow; ++b) {
          Lanes point[kWindow];
#pragma GCC unroll 6
          for (int a = 0; a < kWindow; ++a)
            point[a] = load(in + (a * kWindow + b) * channels * p.tiles);
#pragma GCC unroll 6
          for (int r = 0; r < kWindow; ++r) {
            const Lanes sum = weighted_sum<kWindow>([&](int a) { return kBT[a][r]; },
                                                    [&](int a) { return point[a]; });
            rows[r][b] = sum;
          }
        }
        float* corner = plane + (2 * i * p.padded_w + 2 * j) * kLanes;
#pragma GCC unroll 6
        for (int r = 0; r < kWindow; ++r) {
#pragma GCC unroll 6
          for (int s = 0; s < kWindow; ++s) {
            const Lanes sum = weighted_sum<kWindow>([&](int b) { return kBT[b][s]; },
                                                    [&](int b) { return rows[r][b]; });
            float* at = corner + (r * p.padded_w + s) * kLanes;
            store(at, load(at) + sum);
          }
        }
      }
    }
  }
}

// The block's dx out of the padded planes' lanes, rounded once to `dtype`.
void transpose_out_of_padding(const Plan& p, const float* padded, Index first, Index count,
                              void* dx, DType dtype, float* image_scratch) {
  const Conv2dGeometry& g = p.g;
  for (Index n = 0; n < count; ++n) {
    float* out = output_floats(dx, dtype, (first + n) * p.image, image_scratch);
    for (Index c = 0; c < g.channels; ++c) {
      for (Index h = 0; h < g.height; ++h) {
        const float* row =
            padded +
            ((c * p.padded_h + h + g.params.pad_h) * p.padded_w + g.params.pad_w) * kLanes + n;
        float* target = out + (c * g.height + h) * g.width;
        for (Index w = 0; w < g.width; ++w)
          target[w] = row[w * kLanes];
      }
    }
    store_floats(out, dx, dtype, (first + n) * p.image, p.image);
  }
}

// dw[k][c] += G^T dU[k][c] G, in double, dU the chunks' sums added in chunk order.
void add_filter_gradients(const Conv2dGeometry& g, const ThreadScratch& partials, int chunks,
                          float* dw) {
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  cpu_pool().parallel_for(pairs, [&](Index begin, Index end, int) {
    for (Index pair = begin; pair < end; ++pair) {
      double du[kWindow][kWindow];
      for (int point = 0; point < kPoints; ++point) {
        float sum = partials.slice(0)[point * pairs + pair];
        for (int chunk = 1; chunk < chunks; ++chunk)
          sum += partials.slice(chunk)[point * pairs + pair];
        du[point / kWindow][point % kWindow] = sum;
      }
      double rows[kTaps][kWindow] = {};  // G^T dU
      for (int r = 0; r < kTaps; ++r) {
        for (int b = 0; b < kWindow; ++b) {
          for (int a = 0; a < kWindow; ++a)
            rows[r][b] += kG[a][r] * du[a][b];
        }
      }
      for (int r = 0; r < kTaps; ++r) {
        for (int s = 0; s < kTaps; ++s) {
          double sum = 0.0;
          for (int b = 0; b < kWindow; ++b)
            sum += rows[r][b] * kG[b][s];
          dw[pair * kTaps * kTaps + r * kTaps + s] += static_cast<float>(sum);
        }
      }
    }
  });
}

}  // namespace

bool winograd_5x5_supports(const Conv2dGeometry& g) {
  const Conv2dParams& p = g.params;
  return g.kernel_h == kTaps && g.kernel_w == kTaps && p.stride_h == 1 && p.stride_w == 1 &&
         p.pad_h <= kTaps - 1 && p.pad_w <= kTaps - 1 && g.out_h > 0 && g.out_w > 0;
}

bool winograd_5x5_preferred(const Conv2dGeometry& g) {
  // Below 16 channels or filters the transforms cost as much as the multiplies they save.
  return winograd_5x5_supports(g) && g.channels >= 16 && g.filters >= 16;
}

void conv2d_winograd_5x5_forward(const Conv2dGeometry& g, const void* x, const float* w,
                                 const float* b, void* y, DType dtype) {
  const Plan plan(g);
  const Tensor u = transform_filters(g, w);
  const float* filters_hat = u.data<float>();
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  const bool widened = dtype != DType::f32;
  const ThreadScratch scratch(plan.padded_floats() + plan.v_floats() + plan.m_floats() +
                                  plan.y_floats() + (widened ? plan.image + plan.output : 0),
                              false);
  const Index blocks = (g.batch + kLanes - 1) / kLanes;
  cpu_pool().parallel_for(blocks, [&](Index begin, Index end, int chunk) {
    float* padded = scratch.slice(chunk);
    float* v = padded + plan.padded_floats();
    float* m = v + plan.v_floats();
    float* y_lanes = m + plan.m_floats();
    float* image_scratch = y_lanes + plan.y_floats();
    float* output_scratch = image_scratch + (widened ? plan.image : 0);
    // Zeroed once: the padding around the planes is never written.
    std::fill(padded, padded + plan.padded_floats(), 0.0f);
    const int tiles = static_cast<int>(plan.tiles);
    for (Index block = begin; block < end; ++block) {
      const Index first = block * kLanes, count = std::min<Index>(kLanes, g.batch - first);
      transpose_in(plan, x, dtype, first, count, padded, image_scratch);
      transform_inputs(plan, padded, v);
      for (int point = 0; point < kPoints; ++point) {
        gemm_serial(false, false, g.filters, tiles, g.channels, 1.0f, filters_hat + point * pairs,
                    g.channels, v + point * g.channels * plan.tiles, tiles, 0.0f,
                    m + point * g.filters * plan.tiles, tiles);
      }
      transform_outputs(plan, m, b, y_lanes);
      transpose_out(plan, y_lanes, first, count, y, dtype, output_scratch);
    }
  });
}

void conv2d_winograd_5x5_backward(const Conv2dGeometry& g, const void* x, const float* w,
                                  const void* dy, float* dw, float* db, void* dx, DType dtype) {
  const Plan plan(g);
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  const Tensor u = dx != nullptr ? transform_filters(g, w) : Tensor();
  // Per thread: x's padded planes and V, dy's lanes and Yh, and for dx its padded planes and
  // dV; the image and output scratch of half dtypes.
  const Index per_thread = 2 * plan.padded_floats() + 2 * plan.v_floats() + plan.y_floats() +
                           plan.m_floats() + plan.image + plan.output;
  const ThreadScratch scratch(per_thread, false);
  // Each chunk's dU (points x filters x channels) and db, added in chunk order afterwards.
  const Index partial_size = kPoints * pairs + g.filters;
  const ThreadScratch partials(partial_size, true);
  const Index blocks = (g.batch + kLanes - 1) / kLanes;
  cpu_pool().parallel_for(blocks, [&](Index begin, Index end, int chunk) {
    float* padded = scratch.slice(chunk);
    float* dx_padded = padded + plan.padded_floats();
    float* v = dx_padded + plan.padded_floats();
    float* dv = v + plan.v_floats();
    float* dy_lanes = dv + plan.v_floats();
    float* yh = dy_lanes + plan.y_floats();
    float* image_scratch = yh + plan.m_floats();
    float* output_scratch = image_scratch + plan.image;
    float* du = partials.slice(chunk);
    float* db_partial = du + kPoints * pairs;
    std::fill(padded, padded + plan.padded_floats(), 0.0f);
    const int tiles = static_cast<int>(plan.tiles);
    for (Index block = begin; block < end; ++block) {
      const Index first = block * kLanes, count = std::min<Index>(kLanes, g.batch - first);
      transpose_in(plan, x, dtype, first, count, padded, image_scratch);
      transform_inputs(plan, padded, v);
      transpose_gradient_in(plan, dy, dtype, first, count, dy_lanes, output_scratch,
                            db != nullptr ? db_partial : nullptr);
      transform_gradients(plan, dy_lanes, yh);
      for (int point = 0; point < kPoints; ++point) {
        gemm_serial(false, true, g.filters, g.channels, tiles, 1.0f,
                    yh + point * g.filters * plan.tiles, tiles, v + point * g.channels * plan.tiles,
                    tiles, 1.0f, du + point * pairs, g.channels);
      }
      if (dx == nullptr) continue;
      for (int point = 0; point < kPoints; ++point) {
        gemm_serial(true, false, g.channels, tiles, g.filters, 1.0f,
                    u.data<float>() + point * pairs, g.channels,
                    yh + point * g.filters * plan.tiles, tiles, 0.0f,
                    dv + point * g.channels * plan.tiles, tiles);
      }
      std::fill(dx_padded, dx_padded + plan.padded_floats(), 0.0f);
      transform_inputs_adjoint(plan, dv, dx_padded);
      transpose_out_of_padding(plan, dx_padded, first, count, dx, dtype, image_scratch);
    }
  });
  const int chunks = cpu_threads();
  add_filter_gradients(g, partials, chunks, dw);
  if (db == nullptr) return;
  for (Index k = 0; k < g.filters; ++k) {
    float sum = partials.slice(0)[kPoints * pairs + k];
    for (int chunk = 1; chunk < chunks; ++chunk)
      sum += partials.slice(chunk)[kPoints * pairs + k];
    db[k] += sum;
  }
}

}  // namespace alloy::cpu
