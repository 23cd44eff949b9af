// Winograd F(2x2, r x r) with the images in vector lanes, for any Toom-Cook matrices F (F::kTaps =
// r, F::kWindow = r + 1; F::kBT, F::kG, F::kAT): the implementation behind
// conv2d_winograd_5x5.h, and behind conv2d_winograd.h's 3x3 kernels on small planes.
//
// The transforms run over 16 images at once, one in each lane of a transposed copy of their
// planes, so that a plane of a few tiles still fills the vectors; each transform point is one
// GEMM of the filters' and the transformed tiles. A GEMM takes a group of 16-image blocks, enough
// for 256 columns (a 4x4 plane has 4 tiles: 4 blocks, 64 images), since narrower GEMMs repack
// their filters too often. The filters' transforms run in double and round once.
//
// The weight gradient is summed per accumulator group (a range of blocks) in the transform
// domain, and the groups' sums added in group order afterwards, as conv2d_winograd.h describes.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/ops/conv2d.h"
#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/float_lanes.h"
#include "core/ops/cpu/lane_sum.h"
#include "core/ops/cpu/lane_transpose.h"
#include "core/ops/cpu/thread_scratch.h"
#include "core/ops/gemm.h"
#include "core/thread_pool.h"

namespace alloy::cpu::winograd_lanes {

using Index = std::int64_t;

// Sixteen floats in vector lanes, one image each (float_lanes.h: one AVX-512 register, or two
// AVX ones).
constexpr int kLanes = kLaneCount;
using Lanes = FloatLanes16;
static_assert(sizeof(Lanes) == kLanes * sizeof(float), "a vector of kLanes floats");

// Columns a GEMM should have at least (see above).
constexpr Index kMinColumns = 256;

inline Lanes load(const float* p) {
  return load_lanes<Lanes>(p);
}

inline void store(float* p, Lanes v) {
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
// window lies inside (padded row 2i .. 2i + kWindow - 1 for tile row i; the image at (pad_h,
// pad_w)). A GEMM's columns hold `group` blocks' tiles: block s of a group at tile slot
// s * per_image, each tile kLanes columns wide; rows of a point are `tiles` floats apart.
template <class F>
struct Plan {
  static constexpr int kWindow = F::kWindow;
  static constexpr int kPoints = kWindow * kWindow;

  explicit Plan(const Conv2dGeometry& g)
      : g(g),
        tile_rows((g.out_h + 1) / 2),
        tile_columns((g.out_w + 1) / 2),
        per_image(tile_rows * tile_columns),
        group(std::clamp<Index>((kMinColumns + per_image * kLanes - 1) / (per_image * kLanes), 1,
                                (g.batch + kLanes - 1) / kLanes)),
        tiles(per_image * kLanes * group),
        padded_h(2 * tile_rows + kWindow - 2),
        padded_w(2 * tile_columns + kWindow - 2),
        image(static_cast<Index>(g.channels) * g.height * g.width),
        output(static_cast<Index>(g.filters) * g.out_h * g.out_w) {}

  // Floats of each per-thread buffer.
  Index padded_floats() const { return g.channels * padded_h * padded_w * kLanes; }
  Index v_floats() const { return kPoints * g.channels * tiles; }
  Index m_floats() const { return kPoints * g.filters * tiles; }
  Index y_floats() const { return output * kLanes; }

  // Where tile (i, j) of a group's block `slot` (in tiles) sits in a row of a point.
  Index tile(Index slot, Index i, Index j) const { return (slot + i * tile_columns + j) * kLanes; }

  const Conv2dGeometry& g;
  Index tile_rows, tile_columns, per_image, group, tiles;
  Index padded_h, padded_w;
  Index image, output;
};

// The filter transforms below run over kPairLanes (filter, channel) pairs at once, in loops over
// the pairs that the compiler vectorises: one pair at a time, in double, they took 40% of a
// 512x512 layer on 4x4 planes. Each pair's arithmetic is the same as alone.
constexpr Index kPairLanes = 8;

// U[point][k][c] = G w[k][c] G^T, in double and rounded once.
template <class F>
Tensor transform_filters(const Conv2dGeometry& g, const float* w) {
  constexpr int kWindow = F::kWindow, kTaps = F::kTaps;
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  Tensor u = Tensor::empty({kWindow * kWindow * pairs}, DType::f32, Device::cpu(),
                           MemoryCategory::workspace);
  float* out = u.data<float>();
  const Index groups = (pairs + kPairLanes - 1) / kPairLanes;
  cpu_pool().parallel_for(groups, [&](Index begin, Index end, int) {
    for (Index group = begin; group < end; ++group) {
      const Index first = group * kPairLanes, lanes = std::min(kPairLanes, pairs - first);
      double taps[kTaps * kTaps][kPairLanes] = {};
      for (Index l = 0; l < lanes; ++l) {
        for (int t = 0; t < kTaps * kTaps; ++t)
          taps[t][l] = w[(first + l) * kTaps * kTaps + t];
      }
      double rows[kWindow][kTaps][kPairLanes] = {};  // G g
      for (int a = 0; a < kWindow; ++a) {
        for (int s = 0; s < kTaps; ++s) {
          for (int r = 0; r < kTaps; ++r) {
            for (Index l = 0; l < kPairLanes; ++l)
              rows[a][s][l] += F::kG[a][r] * taps[r * kTaps + s][l];
          }
        }
      }
      for (int a = 0; a < kWindow; ++a) {
        for (int b = 0; b < kWindow; ++b) {
          double sum[kPairLanes] = {};
          for (int s = 0; s < kTaps; ++s) {
            for (Index l = 0; l < kPairLanes; ++l)
              sum[l] += rows[a][s][l] * F::kG[b][s];
          }
          float* target = out + (a * kWindow + b) * pairs + first;
          for (Index l = 0; l < lanes; ++l)
            target[l] = static_cast<float>(sum[l]);
        }
      }
    }
  });
  return u;
}

// Channel c's plane of images [first, first + count): where each starts in x (or dx), and where
// the plane sits in the padded planes' lanes, its rows `padded_w` vectors apart.
template <class F>
struct ChannelPlanes {
  ChannelPlanes(const Plan<F>& p, Index first, Index count, Index c)
      : size(static_cast<Index>(p.g.height) * p.g.width),
        in_padding(((c * p.padded_h + p.g.params.pad_h) * p.padded_w + p.g.params.pad_w) * kLanes),
        rows{p.g.width, p.padded_w} {
    for (Index n = 0; n < count; ++n)
      offsets[n] = (first + n) * p.image + c * size;
  }

  Index size, in_padding;
  LaneRows rows;
  Index offsets[kLanes] = {};
};

// The block's images [first, first + count) into the padded planes, image n in lane n:
// padded[(c * padded_h + h + pad_h) * padded_w + w + pad_w][n] = x[first + n][c][h][w]. The
// padding, written by no one, stays as the thread zeroed it. A partial block's unused lanes are
// written as zeros: they would otherwise keep an earlier block's images, which the filter
// gradient's GEMMs, summing over every lane, would add in (0 * inf is NaN).
template <class F>
void transpose_in(const Plan<F>& p, const void* x, DType dtype, Index first, Index count,
                  float* padded) {
  for (Index c = 0; c < p.g.channels; ++c) {
    const ChannelPlanes<F> planes(p, first, count, c);
    rows_to_lanes(x, dtype, planes.offsets, static_cast<int>(count), planes.size,
                  padded + planes.in_padding, planes.rows);
  }
}

// V[point][c][tile lanes] = B^T d B for every tile of every channel, at tile slot `slot`.
template <class F>
void transform_inputs(const Plan<F>& p, const float* padded, float* v, Index slot) {
  constexpr int kWindow = F::kWindow;
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
            rows[a][s] = weighted_sum<kWindow>([&](int r) { return F::kBT[a][r]; },
                                               [&](int r) { return d[r][s]; });
          }
        }
        float* out = v + c * p.tiles + p.tile(slot, i, j);
#pragma GCC unroll 6
        for (int a = 0; a < kWindow; ++a) {
#pragma GCC unroll 6
          for (int b = 0; b < kWindow; ++b) {
            const Lanes sum = weighted_sum<kWindow>([&](int s) { return F::kBT[b][s]; },
                                                    [&](int s) { return rows[a][s]; });
            store(out + (a * kWindow + b) * channels * p.tiles, sum);
          }
        }
      }
    }
  }
}

// The outputs of every filter from M[point][k][tile lanes] at tile slot `slot`: A^T m A + bias,
// into the block's transposed output y_lanes[(k * out_h + row) * out_w + column][n].
template <class F>
void transform_outputs(const Plan<F>& p, const float* m, const float* bias, float* y_lanes,
                       Index slot) {
  constexpr int kWindow = F::kWindow;
  const Conv2dGeometry& g = p.g;
  const Index filters = g.filters;
  for (Index k = 0; k < filters; ++k) {
    const Lanes b = Lanes{} + (bias != nullptr ? bias[k] : 0.0f);
    for (Index i = 0; i < p.tile_rows; ++i) {
      for (Index j = 0; j < p.tile_columns; ++j) {
        const float* tile = m + k * p.tiles + p.tile(slot, i, j);
        Lanes rows[2][kWindow];  // A^T m
#pragma GCC unroll 6
        for (int v = 0; v < kWindow; ++v) {
          Lanes point[kWindow];
#pragma GCC unroll 6
          for (int u = 0; u < kWindow; ++u)
            point[u] = load(tile + (u * kWindow + v) * filters * p.tiles);
#pragma GCC unroll 2
          for (int a = 0; a < 2; ++a) {
            rows[a][v] = weighted_sum<kWindow>([&](int u) { return F::kAT[a][u]; },
                                               [&](int u) { return point[u]; });
          }
        }
        for (int a = 0; a < 2; ++a) {
          const Index row = 2 * i + a;
          if (row >= g.out_h) break;
          for (int c = 0; c < 2; ++c) {
            const Index column = 2 * j + c;
            if (column >= g.out_w) break;
            const Lanes sum = weighted_sum<kWindow>([&](int v) { return F::kAT[c][v]; },
                                                    [&](int v) { return rows[a][v]; });
            store(y_lanes + ((k * g.out_h + row) * g.out_w + column) * kLanes, sum + b);
          }
        }
      }
    }
  }
}

// The block's outputs out of their lanes into y, rounded once to `dtype`.
template <class F>
void transpose_out(const Plan<F>& p, const float* y_lanes, Index first, Index count, void* y,
                   DType dtype) {
  Index outputs[kLanes] = {};
  for (Index n = 0; n < count; ++n)
    outputs[n] = (first + n) * p.output;
  lanes_to_rows(y_lanes, {p.output, p.output}, static_cast<int>(count), p.output, y, dtype,
                outputs);
}

// The block's dy into lanes: dy_lanes[(k * out_h + row) * out_w + column][n]; a partial
// block's unused lanes zero, so that they add nothing to the filter gradient. With db_partial,
// each image's plane sums are added there too, while the image is at hand.
template <class F>
void transpose_gradient_in(const Plan<F>& p, const void* dy, DType dtype, Index first, Index count,
                           float* dy_lanes, float* output_scratch, float* db_partial) {
  Index outputs[kLanes] = {};
  for (Index n = 0; n < count; ++n)
    outputs[n] = (first + n) * p.output;
  rows_to_lanes(dy, dtype, outputs, static_cast<int>(count), p.output, dy_lanes,
                {p.output, p.output});
  if (db_partial == nullptr) return;
  const Index plane = static_cast<Index>(p.g.out_h) * p.g.out_w;
  for (Index n = 0; n < count; ++n) {
    const float* in = load_floats(dy, dtype, outputs[n], p.output, output_scratch);
    for (Index k = 0; k < p.g.filters; ++k)
      db_partial[k] += lane_sum(in + k * plane, plane);
  }
}

// Yh[point][k][tile lanes] = A dY A^T for every tile of every filter, at tile slot `slot` (the
// adjoint of transform_outputs); outputs past the plane's edge count as zero.
template <class F>
void transform_gradients(const Plan<F>& p, const float* dy_lanes, float* yh, Index slot) {
  constexpr int kWindow = F::kWindow;
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
        Lanes rows[2][kWindow];  // per output row a: rows[a][v] = sum_c dy[a][c] A^T[c][v]
#pragma GCC unroll 2
        for (int a = 0; a < 2; ++a) {
#pragma GCC unroll 6
          for (int v = 0; v < kWindow; ++v) {
            rows[a][v] = weighted_sum<2>([&](int c) { return F::kAT[c][v]; },
                                         [&](int c) { return dy[a][c]; });
          }
        }
        float* out = yh + k * p.tiles + p.tile(slot, i, j);
#pragma GCC unroll 6
        for (int u = 0; u < kWindow; ++u) {
#pragma GCC unroll 6
          for (int v = 0; v < kWindow; ++v) {
            const Lanes sum = weighted_sum<2>([&](int a) { return F::kAT[a][u]; },
                                              [&](int a) { return rows[a][v]; });
            store(out + (u * kWindow + v) * filters * p.tiles, sum);
          }
        }
      }
    }
  }
}

// The adjoint of transform_inputs: B dV B^T per tile of slot `slot`, added into the padded
// planes of dx (overlapping windows, in tile order), which must start zeroed.
template <class F>
void transform_inputs_adjoint(const Plan<F>& p, const float* dv, float* padded, Index slot) {
  constexpr int kWindow = F::kWindow;
  const Index channels = p.g.channels;
  for (Index c = 0; c < channels; ++c) {
    float* plane = padded + c * p.padded_h * p.padded_w * kLanes;
    for (Index i = 0; i < p.tile_rows; ++i) {
      for (Index j = 0; j < p.tile_columns; ++j) {
        const float* in = dv + c * p.tiles + p.tile(slot, i, j);
        Lanes rows[kWindow][kWindow];  // B dV, row r: sum_a B^T[a][r] dV[a][b]
#pragma GCC unroll 6
        for (int b = 0; b < kWindow; ++b) {
          Lanes point[kWindow];
#pragma GCC unroll 6
          for (int a = 0; a < kWindow; ++a)
            point[a] = load(in + (a * kWindow + b) * channels * p.tiles);
#pragma GCC unroll 6
          for (int r = 0; r < kWindow; ++r) {
            rows[r][b] = weighted_sum<kWindow>([&](int a) { return F::kBT[a][r]; },
                                               [&](int a) { return point[a]; });
          }
        }
        float* corner = plane + (2 * i * p.padded_w + 2 * j) * kLanes;
#pragma GCC unroll 6
        for (int r = 0; r < kWindow; ++r) {
#pragma GCC unroll 6
          for (int s = 0; s < kWindow; ++s) {
            const Lanes sum = weighted_sum<kWindow>([&](int b) { return F::kBT[b][s]; },
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
template <class F>
void transpose_out_of_padding(const Plan<F>& p, const float* padded, Index first, Index count,
                              void* dx, DType dtype) {
  for (Index c = 0; c < p.g.channels; ++c) {
    const ChannelPlanes<F> planes(p, first, count, c);
    lanes_to_rows(padded + planes.in_padding, planes.rows, static_cast<int>(count), planes.size, dx,
                  dtype, planes.offsets);
  }
}

// dw[k][c] += G^T dU[k][c] G, in double, dU the groups' sums (partial_size floats apart) added
// in group order.
template <class F>
void add_filter_gradients(const Conv2dGeometry& g, const float* partials, Index partial_size,
                          int groups, float* dw) {
  constexpr int kWindow = F::kWindow, kTaps = F::kTaps, kPoints = kWindow * kWindow;
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  const Index pair_groups = (pairs + kPairLanes - 1) / kPairLanes;
  cpu_pool().parallel_for(pair_groups, [&](Index begin, Index end, int) {
    for (Index pair_group = begin; pair_group < end; ++pair_group) {
      const Index first = pair_group * kPairLanes, lanes = std::min(kPairLanes, pairs - first);
      double du[kWindow][kWindow][kPairLanes] = {};
      for (int point = 0; point < kPoints; ++point) {
        for (Index l = 0; l < lanes; ++l) {
          float sum = partials[point * pairs + first + l];
          for (int group = 1; group < groups; ++group)
            sum += partials[group * partial_size + point * pairs + first + l];
          du[point / kWindow][point % kWindow][l] = sum;
        }
      }
      double rows[kTaps][kWindow][kPairLanes] = {};  // G^T dU
      for (int r = 0; r < kTaps; ++r) {
        for (int b = 0; b < kWindow; ++b) {
          for (int a = 0; a < kWindow; ++a) {
            for (Index l = 0; l < kPairLanes; ++l)
              rows[r][b][l] += F::kG[a][r] * du[a][b][l];
          }
        }
      }
      for (int r = 0; r < kTaps; ++r) {
        for (int s = 0; s < kTaps; ++s) {
          double sum[kPairLanes] = {};
          for (int b = 0; b < kWindow; ++b) {
            for (Index l = 0; l < kPairLanes; ++l)
              sum[l] += rows[r][b][l] * F::kG[b][s];
          }
          for (Index l = 0; l < lanes; ++l)
            dw[(first + l) * kTaps * kTaps + r * kTaps + s] += static_cast<float>(sum[l]);
        }
      }
    }
  });
}

// How many weight-gradient accumulators of `points` x K x C + K floats a backward pass sums
// into: one per pool thread, or as many as `budget_bytes` holds, at least one.
inline int accumulator_groups(const Conv2dGeometry& g, int points, int threads,
                              std::int64_t budget_bytes) {
  const std::int64_t bytes =
      (points * std::int64_t{g.filters} * g.channels + g.filters) * std::int64_t{sizeof(float)};
  return static_cast<int>(std::clamp<std::int64_t>(budget_bytes / bytes, 1, threads));
}

// The first image and image count of block `block`.
inline void block_images(const Conv2dGeometry& g, Index block, Index& first, Index& count) {
  first = block * kLanes;
  count = std::min<Index>(kLanes, g.batch - first);
}

template <class F>
void forward(const Conv2dGeometry& g, const void* x, const float* w, const float* b, void* y,
             DType dtype) {
  const Plan<F> plan(g);
  const Tensor u = transform_filters<F>(g, w);
  const float* filters_hat = u.data<float>();
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  const ThreadScratch scratch(
      plan.padded_floats() + plan.v_floats() + plan.m_floats() + plan.y_floats(), false);
  const Index blocks = (g.batch + kLanes - 1) / kLanes;
  cpu_pool().parallel_for(blocks, [&](Index begin, Index end, int chunk) {
    float* padded = scratch.slice(chunk);
    float* v = padded + plan.padded_floats();
    float* m = v + plan.v_floats();
    float* y_lanes = m + plan.m_floats();
    // Zeroed once: the padding around the planes is never written.
    std::fill(padded, padded + plan.padded_floats(), 0.0f);
    for (Index first_block = begin; first_block < end; first_block += plan.group) {
      const Index members = std::min(plan.group, end - first_block);
      Index first = 0, count = 0;
      for (Index s = 0; s < members; ++s) {
        block_images(g, first_block + s, first, count);
        transpose_in(plan, x, dtype, first, count, padded);
        transform_inputs(plan, padded, v, s * plan.per_image);
      }
      const int columns = static_cast<int>(members * plan.per_image * kLanes);
      const int ld = static_cast<int>(plan.tiles);
      for (int point = 0; point < Plan<F>::kPoints; ++point) {
        gemm_serial(false, false, g.filters, columns, g.channels, 1.0f, filters_hat + point * pairs,
                    g.channels, v + point * g.channels * plan.tiles, ld, 0.0f,
                    m + point * g.filters * plan.tiles, ld);
      }
      for (Index s = 0; s < members; ++s) {
        block_images(g, first_block + s, first, count);
        transform_outputs(plan, m, b, y_lanes, s * plan.per_image);
        transpose_out(plan, y_lanes, first, count, y, dtype);
      }
    }
  });
}

// `groups` accumulators of the weight gradient (at most one per pool thread): group k sums the
// k-th of `groups` equal ranges of blocks.
template <class F>
void backward(const Conv2dGeometry& g, const void* x, const float* w, const void* dy, float* dw,
              float* db, void* dx, DType dtype, int groups) {
  constexpr int kPoints = Plan<F>::kPoints;
  const Plan<F> plan(g);
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  const Tensor u = dx != nullptr ? transform_filters<F>(g, w) : Tensor();
  // Per thread: x's padded planes and V, dy's lanes and Yh, and for dx its padded planes and
  // dV; a half dy's output, widened for the bias gradient's sums.
  const Index per_thread = 2 * plan.padded_floats() + 2 * plan.v_floats() + plan.y_floats() +
                           plan.m_floats() + plan.output;
  const ThreadScratch scratch(per_thread, false);
  // Each group's dU (points x filters x channels) and db, added in group order afterwards.
  const Index partial_size = kPoints * pairs + g.filters;
  const Tensor partials =
      Tensor::zeros({groups * partial_size}, DType::f32, Device::cpu(), MemoryCategory::workspace);
  const Index blocks = (g.batch + kLanes - 1) / kLanes;
  cpu_pool().parallel_for(groups, [&](Index first_group, Index end_group, int chunk) {
    float* padded = scratch.slice(chunk);
    float* dx_padded = padded + plan.padded_floats();
    float* v = dx_padded + plan.padded_floats();
    float* dv = v + plan.v_floats();
    float* dy_lanes = dv + plan.v_floats();
    float* yh = dy_lanes + plan.y_floats();
    float* output_scratch = yh + plan.m_floats();
    std::fill(padded, padded + plan.padded_floats(), 0.0f);
    for (Index accumulator = first_group; accumulator < end_group; ++accumulator) {
      float* du = partials.data<float>() + accumulator * partial_size;
      float* db_partial = du + kPoints * pairs;
      Index begin = 0, end = 0;
      chunk_range(blocks, groups, static_cast<int>(accumulator), begin, end);
      for (Index first_block = begin; first_block < end; first_block += plan.group) {
        const Index members = std::min(plan.group, end - first_block);
        Index first = 0, count = 0;
        for (Index s = 0; s < members; ++s) {
          block_images(g, first_block + s, first, count);
          transpose_in(plan, x, dtype, first, count, padded);
          transform_inputs(plan, padded, v, s * plan.per_image);
          transpose_gradient_in(plan, dy, dtype, first, count, dy_lanes, output_scratch,
                                db != nullptr ? db_partial : nullptr);
          transform_gradients(plan, dy_lanes, yh, s * plan.per_image);
        }
        const int columns = static_cast<int>(members * plan.per_image * kLanes);
        const int ld = static_cast<int>(plan.tiles);
        for (int point = 0; point < kPoints; ++point) {
          gemm_serial(false, true, g.filters, g.channels, columns, 1.0f,
                      yh + point * g.filters * plan.tiles, ld, v + point * g.channels * plan.tiles,
                      ld, 1.0f, du + point * pairs, g.channels);
        }
        if (dx == nullptr) continue;
        for (int point = 0; point < kPoints; ++point) {
          gemm_serial(true, false, g.channels, columns, g.filters, 1.0f,
                      u.data<float>() + point * pairs, g.channels,
                      yh + point * g.filters * plan.tiles, ld, 0.0f,
                      dv + point * g.channels * plan.tiles, ld);
        }
        for (Index s = 0; s < members; ++s) {
          block_images(g, first_block + s, first, count);
          std::fill(dx_padded, dx_padded + plan.padded_floats(), 0.0f);
          transform_inputs_adjoint(plan, dv, dx_padded, s * plan.per_image);
          transpose_out_of_padding(plan, dx_padded, first, count, dx, dtype);
        }
      }
    }
  });
  const float* sums = partials.data<float>();
  add_filter_gradients<F>(g, sums, partial_size, groups, dw);
  if (db == nullptr) return;
  for (Index k = 0; k < g.filters; ++k) {
    float sum = sums[kPoints * pairs + k];
    for (int group = 1; group < groups; ++group)
      sum += sums[group * partial_size + kPoints * pairs + k];
    db[k] += sum;
  }
}

}  // namespace alloy::cpu::winograd_lanes
