#include "core/ops/cpu/conv2d_winograd.h"

#include <algorithm>
#include <cstdint>

#include "core/ops/cpu/conv2d_winograd_lanes.h"
#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/float_lanes.h"
#include "core/ops/cpu/lane_sum.h"
#include "core/ops/cpu/thread_scratch.h"
#include "core/ops/gemm.h"
#include "core/thread_pool.h"

namespace alloy::cpu {

namespace {

using Index = std::int64_t;

constexpr int kPoints = 16;  // a 4x4 tile in the transform domain

// How a convolution splits into tiles: an output tile is 2x2, the input window it reads 4x4,
// starting at (2 * tile_row - pad_h, 2 * tile_column - pad_w).
struct Tiling {
  explicit Tiling(const Conv2dGeometry& g)
      : g(g),
        rows((g.out_h + 1) / 2),
        columns((g.out_w + 1) / 2),
        per_image(rows * columns),
        plane(static_cast<Index>(g.height) * g.width),
        out_plane(static_cast<Index>(g.out_h) * g.out_w) {}

  const Conv2dGeometry& g;
  Index rows, columns, per_image;
  Index plane, out_plane;
};

// Images per block: the transformed inputs and outputs of a block (16 (C + K) floats per tile)
// are written by the transforms and read back by the GEMMs, so they should stay near the core:
// about 1 MiB measured best on a Zen 3 core with 512 KiB of L2 (half or twice that was 5-30%
// slower per layer). The GEMMs still get at least 256 columns: with many channels the
// transformed filters are megabytes, streamed once per block.
Index images_per_block(const Tiling& t, Index batch) {
  constexpr Index cached_floats = Index{1} << 18, min_tiles = 256;
  const Index per_tile = kPoints * (t.g.channels + t.g.filters);
  const Index tiles = std::max(cached_floats / per_tile, min_tiles);
  return std::clamp<Index>(tiles / t.per_image, 1, batch);
}

// Eight floats in vector lanes (float_lanes.h: one AVX register, or two SSE ones).
// The transforms run along tile rows, 2 to 14 tiles in a ResNet: too short for the compiler's
// vectoriser to take on, so they say it explicitly. They load and store whole vectors only
// (partial stores are slow, masked ones microcoded on AMD): every row they touch is followed
// by kWidth floats that are either padding or written later.
constexpr Index kWidth = 8;
using Lanes = FloatLanes8;
static_assert(sizeof(Lanes) == kWidth * sizeof(float), "a vector of kWidth floats");

Lanes load(const float* p) {
  return load_lanes<Lanes>(p);
}

void store(float* p, Lanes v) {
  store_lanes(p, v);
}

Index round_up(Index value, Index multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// A plane in the tiles' padded coordinates, split into its even and odd columns: tile j of a
// tile row reads padded columns 2j .. 2j + 3, that is even[j], odd[j], even[j + 1], odd[j + 1],
// so every transform below runs over unit-stride rows of tiles instead of gathering with
// stride 2. Padded (row, column) is plane (row - pad_h, column - pad_w).
struct SplitPlane {
  SplitPlane(const Tiling& t, float* storage)
      : rows(2 * t.rows + 2),
        stride(round_up(t.columns + 1, kWidth)),
        even(storage),
        odd(storage + rows * stride) {}
  static Index floats(const Tiling& t) {
    return 2 * (2 * t.rows + 2) * round_up(t.columns + 1, kWidth) + kWidth;
  }
  float* even_row(Index row) const { return even + row * stride; }
  float* odd_row(Index row) const { return odd + row * stride; }
  void clear() const { std::fill(even, odd + rows * stride + kWidth, 0.0f); }

  Index rows, stride;
  float* even;
  float* odd;
};

// Scratch floats each transform below needs at most: a split plane and 12 rows of tiles.
Index scratch_floats(const Tiling& t) {
  return SplitPlane::floats(t) + 12 * round_up(t.columns + 1 + kWidth, kWidth);
}

// Column q of a plane row sits at padded column q + pad: in the even or the odd half of the
// split row depending on its parity.
void split_row(const float* in, Index width, Index pad, float* even, float* odd) {
  const Index first_even = pad % 2, first_odd = 1 - first_even;
  float* e = even + (first_even + pad) / 2;
  float* o = odd + (first_odd + pad) / 2;
  for (Index k = 0; first_even + 2 * k < width; ++k)
    e[k] = in[first_even + 2 * k];
  for (Index k = 0; first_odd + 2 * k < width; ++k)
    o[k] = in[first_odd + 2 * k];
}

// The inverse of split_row: the plane row back from its even and odd halves.
void merge_row(const float* even, const float* odd, Index width, Index pad, float* out) {
  const Index first_even = pad % 2, first_odd = 1 - first_even;
  const float* e = even + (first_even + pad) / 2;
  const float* o = odd + (first_odd + pad) / 2;
  for (Index k = 0; first_even + 2 * k < width; ++k)
    out[first_even + 2 * k] = e[k];
  for (Index k = 0; first_odd + 2 * k < width; ++k)
    out[first_odd + 2 * k] = o[k];
}

// `plane` (height x width) placed in a cleared split plane at (pad_h, pad_w).
void split_plane(const float* plane, Index height, Index width, Index pad_h, Index pad_w,
                 const SplitPlane& split) {
  split.clear();
  for (Index row = 0; row < height; ++row) {
    split_row(plane + row * width, width, pad_w, split.even_row(row + pad_h),
              split.odd_row(row + pad_h));
  }
}

// The four transform-domain rows of points (a, 0..3) for tile row i, where transform_input
// and transform_gradient write and the GEMMs read.
struct PointRows {
  PointRows(float* v, Index point_stride, int a, Index offset)
      : p0(v + 4 * a * point_stride + offset),
        p1(p0 + point_stride),
        p2(p1 + point_stride),
        p3(p2 + point_stride) {}
  float *p0, *p1, *p2, *p3;
};

// One plane's tiles -> B^T d B, B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]].
// Point (a, b) of tile (i, j) goes to v[(4a + b) * point_stride + i * columns + j].
void transform_input(const float* plane, const Tiling& t, float* v, Index point_stride,
                     float* scratch) {
  const SplitPlane d(t, scratch);
  split_plane(plane, t.g.height, t.g.width, t.g.params.pad_h, t.g.params.pad_w, d);
  const Index n = t.columns;
  // Row a of B^T combines input rows x and y of the window: u = r_x + sign * r_y.
  static constexpr int kFirst[4] = {0, 1, 2, 1}, kSecond[4] = {2, 2, 1, 3};
  static constexpr float kSign[4] = {-1.0f, 1.0f, -1.0f, -1.0f};
  for (Index i = 0; i < t.rows; ++i) {
    for (int a = 0; a < 4; ++a) {
      const float* ex = d.even_row(2 * i + kFirst[a]);
      const float* ey = d.even_row(2 * i + kSecond[a]);
      const float* ox = d.odd_row(2 * i + kFirst[a]);
      const float* oy = d.odd_row(2 * i + kSecond[a]);
      const float sign = kSign[a];
      const PointRows out(v, point_stride, a, i * n);
      for (Index j = 0; j < n; j += kWidth) {
        const Lanes e0 = load(ex + j) + load(ey + j) * sign;
        const Lanes e1 = load(ex + j + 1) + load(ey + j + 1) * sign;
        const Lanes o0 = load(ox + j) + load(oy + j) * sign;
        const Lanes o1 = load(ox + j + 1) + load(oy + j + 1) * sign;
        store(out.p0 + j, e0 - e1);
        store(out.p1 + j, o0 + e1);
        store(out.p2 + j, e1 - o0);
        store(out.p3 + j, o0 - o1);
      }
    }
  }
}

// The tiles of one output plane from the transform domain: A^T m A + bias, with
// A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]; the inverse of transform_input's layout.
void transform_output(const float* m, Index point_stride, const Tiling& t, float bias, float* y,
                      float* scratch) {
  const Index n = t.columns;
  float* even = scratch;
  float* odd = scratch + n + kWidth;
  for (Index i = 0; i < t.rows; ++i) {
    const float* p[kPoints];
    for (int point = 0; point < kPoints; ++point)
      p[point] = m + point * point_stride + i * n;
    for (Index row = 2 * i; row < std::min<Index>(2 * i + 2, t.g.out_h); ++row) {
      const bool top = row == 2 * i;
      for (Index j = 0; j < n; j += kWidth) {
        Lanes s[4];
        for (int b = 0; b < 4; ++b) {
          s[b] = top ? load(p[b] + j) + load(p[4 + b] + j) + load(p[8 + b] + j)
                     : load(p[4 + b] + j) - load(p[8 + b] + j) - load(p[12 + b] + j);
        }
        store(even + j, s[0] + s[1] + s[2] + bias);
        store(odd + j, s[1] - s[2] - s[3] + bias);
      }
      merge_row(even, odd, t.g.out_w, 0, y + row * t.g.out_w);
    }
  }
}

// One plane of dY -> A dY A^T per tile (the adjoint of transform_output), in transform_input's
// layout, with A = [[1, 0], [1, 1], [1, -1], [0, -1]]; outputs past the plane's edge count as
// zero.
void transform_gradient(const float* dy, const Tiling& t, float* v, Index point_stride,
                        float* scratch) {
  const SplitPlane d(t, scratch);
  split_plane(dy, t.g.out_h, t.g.out_w, 0, 0, d);
  const Index n = t.columns;
  for (Index i = 0; i < t.rows; ++i) {
    const float *e0 = d.even_row(2 * i), *o0 = d.odd_row(2 * i);
    const float *e1 = d.even_row(2 * i + 1), *o1 = d.odd_row(2 * i + 1);
    for (int a = 0; a < 4; ++a) {
      const PointRows out(v, point_stride, a, i * n);
      for (Index j = 0; j < n; j += kWidth) {
        // Row a of A on the tile's two rows, then A on the columns.
        Lanes we, wo;
        if (a == 0) {
          we = load(e0 + j);
          wo = load(o0 + j);
        } else if (a == 1) {
          we = load(e0 + j) + load(e1 + j);
          wo = load(o0 + j) + load(o1 + j);
        } else if (a == 2) {
          we = load(e0 + j) - load(e1 + j);
          wo = load(o0 + j) - load(o1 + j);
        } else {
          we = -load(e1 + j);
          wo = -load(o1 + j);
        }
        store(out.p0 + j, we);
        store(out.p1 + j, we + wo);
        store(out.p2 + j, we - wo);
        store(out.p3 + j, -wo);
      }
    }
  }
}

// The adjoint of transform_input: B dV B^T per tile, summed over the overlapping 4x4 windows
// (neighbours share two rows and two columns), written to the plane dx.
void transform_input_adjoint(float* dv, Index point_stride, const Tiling& t, float* dx,
                             float* scratch) {
  const SplitPlane sum(t, scratch);
  sum.clear();
  const Index n = t.columns, n1 = n + 1, row = round_up(n1 + kWidth, kWidth);
  float* column = scratch + SplitPlane::floats(t);  // 4 rows: a tile's columns, B-combined
  float* he = column + 4 * row;                     // [4][row]: even padded columns
  float* ho = he + 4 * row;                         // [4][row]: odd ones
  // column 0 and 1 hold tile j's first and second at j, columns 2 and 3 its third and fourth
  // at j + 1: padded column 2j sums tile j's first and tile j - 1's third, 2j + 1 tile j's
  // second and tile j - 1's fourth; columns 2 and 3 keep a zero at 0.
  std::fill(column, column + 4 * row, 0.0f);
  float* c0 = column;
  float* c1 = column + row;
  float* c2 = column + 2 * row;
  float* c3 = column + 3 * row;
  for (Index i = 0; i < t.rows; ++i) {
    // B's rows [1, 0, 0, 0], [0, 1, -1, 1], [-1, 1, 1, 0], [0, 0, 0, -1] on the columns.
    for (int a = 0; a < 4; ++a) {
      const PointRows in(dv, point_stride, a, i * n);
      for (Index j = 0; j < n; j += kWidth) {
        const Lanes p0 = load(in.p0 + j), p1 = load(in.p1 + j);
        const Lanes p2 = load(in.p2 + j), p3 = load(in.p3 + j);
        store(c0 + j, p0);
        store(c1 + j, p1 - p2 + p3);
        store(c2 + 1 + j, p1 + p2 - p0);
        store(c3 + 1 + j, -p3);
      }
      c0[n] = c1[n] = 0.0f;  // whole-vector stores left the next tile row's values there
      for (Index j = 0; j < n1; j += kWidth) {
        store(he + a * row + j, load(c0 + j) + load(c2 + j));
        store(ho + a * row + j, load(c1 + j) + load(c3 + j));
      }
    }
    // Then the same combination on the rows, added into the padded rows the tile row read.
    for (int r = 0; r < 4; ++r) {
      float* se = sum.even_row(2 * i + r);
      float* so = sum.odd_row(2 * i + r);
      for (Index j = 0; j < n1; j += kWidth) {
        Lanes e, o;
        if (r == 0) {
          e = load(he + j);
          o = load(ho + j);
        } else if (r == 1) {
          e = load(he + row + j) - load(he + 2 * row + j) + load(he + 3 * row + j);
          o = load(ho + row + j) - load(ho + 2 * row + j) + load(ho + 3 * row + j);
        } else if (r == 2) {
          e = load(he + row + j) + load(he + 2 * row + j) - load(he + j);
          o = load(ho + row + j) + load(ho + 2 * row + j) - load(ho + j);
        } else {
          e = -load(he + 3 * row + j);
          o = -load(ho + 3 * row + j);
        }
        store(se + j, load(se + j) + e);
        store(so + j, load(so + j) + o);
      }
    }
  }
  for (Index r = 0; r < t.g.height; ++r) {
    merge_row(sum.even_row(r + t.g.params.pad_h), sum.odd_row(r + t.g.params.pad_h), t.g.width,
              t.g.params.pad_w, dx + r * t.g.width);
  }
}

// Filter pairs (k, c) are transformed in groups of kLanes, transposed through small arrays so
// the arithmetic runs across pairs in vector lanes.
constexpr Index kLanes = 8;

// U[point][k][c] = G g[k][c] G^T, G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].
Tensor transform_filters(const Conv2dGeometry& g, const float* w) {
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  Tensor u = Tensor::empty({kPoints * pairs}, DType::f32, Device::cpu(), MemoryCategory::workspace);
  float* out = u.data<float>();
  const Index groups = (pairs + kLanes - 1) / kLanes;
  cpu_pool().parallel_for(groups, [&](Index begin, Index end, int) {
    for (Index group = begin; group < end; ++group) {
      const Index first = group * kLanes, lanes = std::min(kLanes, pairs - first);
      float f[9][kLanes] = {}, gf[4][3][kLanes], u_hat[kPoints][kLanes];
      for (Index lane = 0; lane < lanes; ++lane) {
        for (int tap = 0; tap < 9; ++tap)
          f[tap][lane] = w[(first + lane) * 9 + tap];
      }
      for (int s = 0; s < 3; ++s) {
        for (Index l = 0; l < kLanes; ++l) {
          const float f0 = f[s][l], f1 = f[3 + s][l], f2 = f[6 + s][l];
          gf[0][s][l] = f0;
          gf[1][s][l] = 0.5f * (f0 + f1 + f2);
          gf[2][s][l] = 0.5f * (f0 - f1 + f2);
          gf[3][s][l] = f2;
        }
      }
      for (int a = 0; a < 4; ++a) {
        for (Index l = 0; l < kLanes; ++l) {
          const float f0 = gf[a][0][l], f1 = gf[a][1][l], f2 = gf[a][2][l];
          u_hat[4 * a][l] = f0;
          u_hat[4 * a + 1][l] = 0.5f * (f0 + f1 + f2);
          u_hat[4 * a + 2][l] = 0.5f * (f0 - f1 + f2);
          u_hat[4 * a + 3][l] = f2;
        }
      }
      for (int point = 0; point < kPoints; ++point)
        std::copy(u_hat[point], u_hat[point] + lanes, out + point * pairs + first);
    }
  });
  return u;
}

// dw[k][c] += G^T dU[k][c] G, with dU the sum of the groups' accumulators taken in group order.
void add_filter_gradients(const Conv2dGeometry& g, const float* partials, Index partial_size,
                          int accumulators, float* dw) {
  const Index pairs = static_cast<Index>(g.filters) * g.channels;
  const Index groups = (pairs + kLanes - 1) / kLanes;
  cpu_pool().parallel_for(groups, [&](Index begin, Index end, int) {
    for (Index group = begin; group < end; ++group) {
      const Index first = group * kLanes, lanes = std::min(kLanes, pairs - first);
      float du[kPoints][kLanes] = {}, gd[3][4][kLanes], dg[9][kLanes];
      for (int point = 0; point < kPoints; ++point) {
        for (int a = 0; a < accumulators; ++a) {
          const float* partial = partials + a * partial_size + point * pairs + first;
          for (Index l = 0; l < lanes; ++l)
            du[point][l] = a == 0 ? partial[l] : du[point][l] + partial[l];
        }
      }
      // G^T = [[1, 1/2, 1/2, 0], [0, 1/2, -1/2, 0], [0, 1/2, 1/2, 1]] on the rows, then columns.
      for (int b = 0; b < 4; ++b) {
        for (Index l = 0; l < kLanes; ++l) {
          const float d0 = du[b][l], d1 = du[4 + b][l], d2 = du[8 + b][l], d3 = du[12 + b][l];
          gd[0][b][l] = d0 + 0.5f * (d1 + d2);
          gd[1][b][l] = 0.5f * (d1 - d2);
          gd[2][b][l] = 0.5f * (d1 + d2) + d3;
        }
      }
      for (int r = 0; r < 3; ++r) {
        for (Index l = 0; l < kLanes; ++l) {
          const float d0 = gd[r][0][l], d1 = gd[r][1][l], d2 = gd[r][2][l], d3 = gd[r][3][l];
          dg[3 * r][l] = d0 + 0.5f * (d1 + d2);
          dg[3 * r + 1][l] = 0.5f * (d1 - d2);
          dg[3 * r + 2][l] = 0.5f * (d1 + d2) + d3;
        }
      }
      for (Index lane = 0; lane < lanes; ++lane) {
        for (int tap = 0; tap < 9; ++tap)
          dw[(first + lane) * 9 + tap] += dg[tap][lane];
      }
    }
  });
}

// Carves one thread's scratch slice into consecutive buffers.
class Carve {
 public:
  explicit Carve(float* base) : next_(base) {}
  float* take(Index count) {
    float* block = next_;
    next_ += count;
    return block;
  }

 private:
  float* next_;
};

// The sizes the forward and backward passes share, and their loop over blocks of images.
struct Plan {
  Plan(const Conv2dGeometry& g, DType dtype)
      : t(g),
        dtype(dtype),
        widened(dtype != DType::f32),
        channels(g.channels),
        filters(g.filters),
        image(channels * t.plane),
        output(filters * t.out_plane),
        block(images_per_block(t, (g.batch + cpu_threads() - 1) / cpu_threads())) {}

  // Floats of a block's transformed rows for `count` channels or filters: rows of tiles (per
  // point and channel or filter) are kWidth floats longer than the block's tiles, the padding
  // the transforms' whole-vector stores run into.
  Index block_floats(Index count) const { return kPoints * count * (block * t.per_image + kWidth); }

  // Calls body(first, count, tiles, ld) for the blocks of images [begin, end): count images
  // from `first`, `tiles` tiles in all, rows of stride ld.
  template <class Body>
  void for_blocks(Index begin, Index end, const Body& body) const {
    for (Index first = begin; first < end; first += block) {
      const Index count = std::min(block, end - first);
      const Index tiles = count * t.per_image;
      body(first, count, tiles, tiles + kWidth);
    }
  }

  // Image `index`'s input planes, transformed into v at tile offset `slot`.
  void transform_image(const void* x, Index index, Index slot, float* v, Index ld, float* x_scratch,
                       float* rows) const {
    const float* in = load_floats(x, dtype, index * image, image, x_scratch);
    for (Index c = 0; c < channels; ++c)
      transform_input(in + c * t.plane, t, v + c * ld + slot, channels * ld, rows);
  }

  Tiling t;
  DType dtype;
  bool widened;
  Index channels, filters, image, output, block;
};

// Lavin's F(2, 3) in conv2d_winograd_lanes.h's terms: the same B^T, G and A^T as above.
struct F2x3 {
  static constexpr int kTaps = 3;
  static constexpr int kWindow = 4;
  static constexpr float kBT[kWindow][kWindow] = {
      {1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
  static constexpr double kG[kWindow][kTaps] = {
      {1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  static constexpr float kAT[2][kWindow] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
};

// Planes at most 8 wide (ResNet-18's 7x7 and 4x4) take the images-in-lanes kernels: their rows
// of 2 to 4 tiles would fill 2 to 4 of the plane kernels' 8 lanes. Measured on a Zen 5 core,
// the 7x7 and 4x4 layers ran 1.2-1.4x faster so; the 14x14 ones no faster.
bool in_lanes(const Conv2dGeometry& g) {
  return g.out_w <= 8;
}

}  // namespace

bool winograd_supports(const Conv2dGeometry& g) {
  const Conv2dParams& p = g.params;
  return g.kernel_h == 3 && g.kernel_w == 3 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h <= 2 &&
         p.pad_w <= 2;
}

bool winograd_preferred(const Conv2dGeometry& g) {
  // Below 16 channels or filters the transforms cost as much as the multiplies they save.
  return winograd_supports(g) && g.channels >= 16 && g.filters >= 16;
}

void conv2d_winograd_forward(const Conv2dGeometry& g, const void* x, const float* w, const float* b,
                             void* y, DType dtype) {
  if (in_lanes(g)) {
    winograd_lanes::forward<F2x3>(g, x, w, b, y, dtype);
    return;
  }
  const Plan plan(g, dtype);
  const Tiling& t = plan.t;
  const Index channels = plan.channels, filters = plan.filters, output = plan.output;
  const Tensor u = transform_filters(g, w);
  const float* filters_hat = u.data<float>();
  const ThreadScratch scratch(plan.block_floats(channels + filters) +
                                  (plan.widened ? plan.image + output : 0) + scratch_floats(t),
                              false);
  cpu_pool().parallel_for(g.batch, [&](Index begin, Index end, int chunk) {
    Carve carve(scratch.slice(chunk));
    float* v = carve.take(plan.block_floats(channels));
    float* m = carve.take(plan.block_floats(filters));
    float* x_image = carve.take(plan.widened ? plan.image : 0);
    float* y_image = carve.take(plan.widened ? output : 0);
    float* rows = carve.take(scratch_floats(t));
    plan.for_blocks(begin, end, [&](Index first, Index count, Index tiles, Index ld) {
      for (Index i = 0; i < count; ++i)
        plan.transform_image(x, first + i, i * t.per_image, v, ld, x_image, rows);
      for (int point = 0; point < kPoints; ++point) {
        gemm_serial(false, false, g.filters, static_cast<int>(tiles), g.channels, 1.0f,
                    filters_hat + point * filters * channels, g.channels, v + point * channels * ld,
                    static_cast<int>(ld), 0.0f, m + point * filters * ld, static_cast<int>(ld));
      }
      for (Index i = 0; i < count; ++i) {
        float* out = output_floats(y, dtype, (first + i) * output, y_image);
        for (Index k = 0; k < filters; ++k) {
          transform_output(m + k * ld + i * t.per_image, filters * ld, t,
                           b != nullptr ? b[k] : 0.0f, out + k * t.out_plane, rows);
        }
        store_floats(out, y, dtype, (first + i) * output, output);
      }
    });
  });
}

int winograd_accumulators(const Conv2dGeometry& g, int threads,
                          std::int64_t accumulator_budget_bytes) {
  return winograd_lanes::accumulator_groups(g, kPoints, threads, accumulator_budget_bytes);
}

void conv2d_winograd_backward(const Conv2dGeometry& g, const void* x, const float* w,
                              const void* dy, float* dw, float* db, void* dx, DType dtype,
                              std::int64_t accumulator_budget_bytes) {
  if (in_lanes(g)) {
    winograd_lanes::backward<F2x3>(
        g, x, w, dy, dw, db, dx, dtype,
        winograd_accumulators(g, cpu_threads(), accumulator_budget_bytes));
    return;
  }
  const Plan plan(g, dtype);
  const Tiling& t = plan.t;
  const Index channels = plan.channels, filters = plan.filters;
  const Index image = plan.image, output = plan.output;
  Tensor u;
  if (dx != nullptr) u = transform_filters(g, w);
  const ThreadScratch scratch(plan.block_floats(channels + filters) +
                                  (plan.widened ? 2 * image + output : 0) + scratch_floats(t),
                              false);
  // Each group of images sums its tiles' filter gradients (in the transform domain) and bias
  // gradients in its own accumulator; add_filter_gradients combines them in group order.
  const Index partial_size = kPoints * filters * channels + filters;
  const int groups = winograd_accumulators(g, cpu_threads(), accumulator_budget_bytes);
  const Tensor partials =
      Tensor::zeros({groups * partial_size}, DType::f32, Device::cpu(), MemoryCategory::workspace);
  // With a group per thread, thread k takes group k and the k-th slice of the batch.
  cpu_pool().parallel_for(groups, [&](Index first_group, Index end_group, int chunk) {
    if (first_group == end_group) return;
    Carve carve(scratch.slice(chunk));
    float* v = carve.take(plan.block_floats(channels));
    float* dy_hat = carve.take(plan.block_floats(filters));
    float* x_image = carve.take(plan.widened ? image : 0);
    float* dy_image = carve.take(plan.widened ? output : 0);
    float* dx_image = carve.take(plan.widened ? image : 0);
    float* rows = carve.take(scratch_floats(t));
    float* du = partials.data<float>() + first_group * partial_size;
    float* db_partial = du + kPoints * filters * channels;
    Index begin = 0, end = 0;
    chunk_range(g.batch, groups, static_cast<int>(first_group), begin, end);
    plan.for_blocks(begin, end, [&](Index first, Index count, Index tiles, Index ld) {
      for (Index i = 0; i < count; ++i) {
        plan.transform_image(x, first + i, i * t.per_image, v, ld, x_image, rows);
        const float* grad = load_floats(dy, dtype, (first + i) * output, output, dy_image);
        for (Index k = 0; k < filters; ++k) {
          const float* plane = grad + k * t.out_plane;
          transform_gradient(plane, t, dy_hat + k * ld + i * t.per_image, filters * ld, rows);
          if (db != nullptr) db_partial[k] += lane_sum(plane, t.out_plane);
        }
      }
      for (int point = 0; point < kPoints; ++point) {
        gemm_serial(false, true, g.filters, g.channels, static_cast<int>(tiles), 1.0f,
                    dy_hat + point * filters * ld, static_cast<int>(ld), v + point * channels * ld,
                    static_cast<int>(ld), 1.0f, du + point * filters * channels, g.channels);
      }
      if (dx == nullptr) return;
      // v is spent: it takes dV = U^T dY-hat per point.
      for (int point = 0; point < kPoints; ++point) {
        gemm_serial(true, false, g.channels, static_cast<int>(tiles), g.filters, 1.0f,
                    u.data<float>() + point * filters * channels, g.channels,
                    dy_hat + point * filters * ld, static_cast<int>(ld), 0.0f,
                    v + point * channels * ld, static_cast<int>(ld));
      }
      for (Index i = 0; i < count; ++i) {
        float* target = output_floats(dx, dtype, (first + i) * image, dx_image);
        for (Index c = 0; c < channels; ++c) {
          transform_input_adjoint(v + c * ld + i * t.per_image, channels * ld, t,
                                  target + c * t.plane, rows);
        }
        store_floats(target, dx, dtype, (first + i) * image, image);
      }
    });
  });
  const float* sums = partials.data<float>();
  add_filter_gradients(g, sums, partial_size, groups, dw);
  if (db == nullptr) return;
  for (Index k = 0; k < filters; ++k) {
    float sum = sums[kPoints * filters * channels + k];
    for (int group = 1; group < groups; ++group)
      sum += sums[group * partial_size + kPoints * filters * channels + k];
    db[k] += sum;
  }
}

}  // namespace alloy::cpu
