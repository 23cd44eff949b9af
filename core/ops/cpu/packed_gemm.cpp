#include "core/ops/cpu/packed_gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/ops/cpu/float_lanes.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace alloy::cpu {

#if defined(__AVX512F__)

namespace {

using Index = std::int64_t;

// The register tile: kRows rows of c by kColumns columns (two 16-float vectors), 16 of the 32
// vector registers as accumulators. 12 and 14 rows measured 5-10% slower on ResNet-18's
// shapes (a Zen 5 core): more rows of padding where m is 64, for no fewer loads per product.
constexpr Index kRows = 8;
constexpr Index kColumns = 32;
// The cache blocks (Goto's): a kDepth x kColumns panel of b (32 KiB) stays in L1 while the
// kernel runs down a kBlockRows x kDepth block of a (128 KiB) in L2; a kDepth x kBlockColumns
// block of b (up to 2 MiB) is packed once and reused by every block of a.
constexpr Index kDepth = 256;
constexpr Index kBlockRows = 128;
constexpr Index kBlockColumns = 2048;
static_assert(kBlockColumns % kColumns == 0, "whole panels per block");

Index round_up(Index value, Index multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// A thread's packing buffer, kept between calls (a fresh 2 MiB block per call would cost page
// faults) and aligned to a cache line so the kernel's loads never split one.
class PackBuffer {
 public:
  float* floats(Index count) {
    constexpr Index kAlign = 64 / sizeof(float);
    if (count + kAlign > static_cast<Index>(storage_.size()))
      storage_.resize(static_cast<std::size_t>(count + kAlign));
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    return storage_.data() + (64 - address % 64) % 64 / sizeof(float);
  }

 private:
  std::vector<float> storage_;
};

// The lanes of a 16-float vector at [first, first + 16) that lie below `columns`.
inline __mmask16 lanes_below(Index columns, Index first) {
  const Index count = std::clamp<Index>(columns - first, 0, 16);
  return static_cast<__mmask16>((1u << count) - 1u);
}

// Eight rows of eight floats (row r at rows[r]) written as eight columns: out + c * stride
// gets element c of every row, in row order. The AVX in-register transpose: packing operands
// whose depth runs along their rows would otherwise be a scalar gather, as slow as the GEMM
// itself where m or n is under a hundred.
inline void transpose_8x8(const float* const rows[8], float* out, Index stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_ps(rows[i]);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}

// `count` (<= width) rows of `source` (row stride ld), columns [0, depth), written transposed
// into a panel `width` floats wide: out[p * width + i] = source[i * ld + p], zeros in the
// panel's columns past `count`.
void pack_transposed(const float* source, Index ld, Index count, Index depth, Index width,
                     float* out) {
  Index i = 0;
  for (; i + 8 <= count; i += 8) {
    const float* rows[8];
    for (int r = 0; r < 8; ++r)
      rows[r] = source + (i + r) * ld;
    Index p = 0;
    for (; p + 8 <= depth; p += 8) {
      transpose_8x8(rows, out + p * width + i, width);
      for (int r = 0; r < 8; ++r)
        rows[r] += 8;
    }
    for (; p < depth; ++p) {
      for (int r = 0; r < 8; ++r)
        out[p * width + i + r] = source[(i + r) * ld + p];
    }
  }
  for (; i < count; ++i) {
    for (Index p = 0; p < depth; ++p)
      out[p * width + i] = source[i * ld + p];
  }
  for (Index p = 0; p < depth; ++p)
    std::fill(out + p * width + count, out + (p + 1) * width, 0.0f);
}

// `count` (<= width) columns of `source`'s rows [0, depth) (row stride ld) copied into a panel
// `width` floats wide, zeros past `count`. In vector moves where it can: std::copy's call to
// memmove per 8 floats cost 5% of ResNet-18's convolutions.
void pack_straight(const float* source, Index ld, Index count, Index depth, Index width,
                   float* out) {
  if (count == 8 && width == 8) {
    for (Index p = 0; p < depth; ++p)
      _mm256_storeu_ps(out + p * 8, _mm256_loadu_ps(source + p * ld));
    return;
  }
  if (width % 16 == 0) {
    for (Index p = 0; p < depth; ++p) {
      for (Index j = 0; j < width; j += 16) {
        const __mmask16 valid = lanes_below(count, j);
        _mm512_storeu_ps(out + p * width + j, _mm512_maskz_loadu_ps(valid, source + p * ld + j));
      }
    }
    return;
  }
  for (Index p = 0; p < depth; ++p) {
    std::copy(source + p * ld, source + p * ld + count, out + p * width);
    std::fill(out + p * width + count, out + (p + 1) * width, 0.0f);
  }
}

// Lines [first, first + count) of an operand over depth [p0, p0 + depth), in panels `width`
// lines wide: for each p, the panel's `width` values at depth p, zeros past the last line. Line j
// at depth p is source[j * ld + p] where the depth runs along the stored rows, else
// source[p * ld + j].
void pack_panels(const float* source, Index ld, bool depth_along_rows, Index first, Index count,
                 Index p0, Index depth, Index width, float* out) {
  for (Index line = first; line < first + count; line += width) {
    const Index lines = std::min(width, first + count - line);
    if (depth_along_rows) {
      pack_transposed(source + line * ld + p0, ld, lines, depth, width, out);
    } else {
      pack_straight(source + p0 * ld + line, ld, lines, depth, width, out);
    }
    out += depth * width;
  }
}

// Rows [row, row + rows) of op(a) over depth [p0, p0 + depth), in panels of kRows rows.
void pack_a(bool transpose, const float* a, Index lda, Index row, Index rows, Index p0, Index depth,
            float* out) {
  pack_panels(a, lda, !transpose, row, rows, p0, depth, kRows, out);
}

// Columns [column, column + columns) of op(b) over depth [p0, p0 + depth), in panels of
// kColumns columns.
void pack_b(bool transpose, const float* b, Index ldb, Index p0, Index depth, Index column,
            Index columns, float* out) {
  pack_panels(b, ldb, transpose, column, columns, p0, depth, kColumns, out);
}

// Where the kernel reads a panel of b: whole panels of an untransposed b in place (each row's
// 32 floats are contiguous already; copying them cost as much as the products where m or k is
// small), the rest from the packed copy.
struct PanelsOfB {
  PanelsOfB(bool transpose, const float* b, Index ldb, Index p0, Index depth, Index column,
            Index columns, float* packed)
      : source(b + p0 * ldb + column),
        ldb(ldb),
        depth(depth),
        whole(transpose ? 0 : columns / kColumns * kColumns),
        packed(packed) {
    pack_b(transpose, b, ldb, p0, depth, column + whole, columns - whole, packed);
  }
  static Index packed_floats(bool transpose, Index depth, Index columns) {
    return transpose ? depth * round_up(columns, kColumns) : depth * kColumns;
  }

  const float* panel(Index first) const {
    return first < whole ? source + first : packed + (first - whole) * depth;
  }
  Index stride(Index first) const { return first < whole ? ldb : kColumns; }

  const float* source;
  Index ldb, depth, whole;
  const float* packed;
};

// The register tile's products: acc = a_panel * b_panel over `depth`.
struct Tile {
  __m512 acc[kRows][2];
};

inline void multiply_panels(Index depth, const float* a, const float* b, Index b_stride,
                            Tile& tile) {
  for (Index i = 0; i < kRows; ++i)
    tile.acc[i][0] = tile.acc[i][1] = _mm512_setzero_ps();
  for (Index p = 0; p < depth; ++p) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    for (Index i = 0; i < kRows; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      tile.acc[i][0] = _mm512_fmadd_ps(ai, b0, tile.acc[i][0]);
      tile.acc[i][1] = _mm512_fmadd_ps(ai, b1, tile.acc[i][1]);
    }
    a += kRows;
    b += b_stride;
  }
}

// c = alpha * product + beta * c (beta == 0: c unread), with one rounding for the sum, in the
// `valid` lanes (the others of c untouched). Whole and edge tiles run the same arithmetic, so an
// element's bits do not depend on where a tile boundary falls.
inline void combine_store(__m512 product, float alpha, float beta, float* c, __mmask16 valid) {
  const __m512 scaled = alpha == 1.0f ? product : _mm512_mul_ps(product, _mm512_set1_ps(alpha));
  if (valid == 0xffff) {
    const __m512 sum =
        beta == 0.0f ? scaled : _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c), scaled);
    _mm512_storeu_ps(c, sum);
    return;
  }
  const __m512 sum =
      beta == 0.0f ? scaled
                   : _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(valid, c), scaled);
  _mm512_mask_storeu_ps(c, valid, sum);
}

void store_tile(const Tile& tile, Index rows, Index columns, float alpha, float beta, float* c,
                Index ldc) {
  const __mmask16 low = lanes_below(columns, 0), high = lanes_below(columns, 16);
  for (Index i = 0; i < rows; ++i) {
    float* row = c + i * ldc;
    combine_store(tile.acc[i][0], alpha, beta, row, low);
    if (high != 0) combine_store(tile.acc[i][1], alpha, beta, row + 16, high);
  }
}

// Products whose operands both run along k (a as is, b transposed: weight gradients, dY X^T)
// with fewer than kColumns columns, where the register tile would compute mostly padding (LeNet's
// 9 and 20): c in 4 x 4 tiles of dot products along k, 16 products per lane step, read from a
// as it is and from a copy of b (below). The choice depends on n alone, and cpu::gemm never splits
// c into column blocks narrower than kColumns, so an element's path does not depend on the thread
// count.
constexpr Index kDotTile = 4;

inline float scale_and_add(float product, float alpha, float beta, float c) {
  const float scaled = alpha == 1.0f ? product : product * alpha;
  return beta == 0.0f ? scaled : std::fma(beta, c, scaled);
}

// The sum of a vector's lanes, halves first, in GCC's vector extension: GCC 12's own
// intrinsics for the halves (_mm512_extract*, _mm512_reduce_add_ps) warn of uninitialised values.
inline float sum_lanes(__m512 v) {
  using FloatLanes4 = float __attribute__((vector_size(4 * sizeof(float))));
  const FloatLanes16 x = v;
  const FloatLanes8 eight = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
                            __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  const FloatLanes4 four = __builtin_shufflevector(eight, eight, 0, 1, 2, 3) +
                           __builtin_shufflevector(eight, eight, 4, 5, 6, 7);
  return (four[0] + four[2]) + (four[1] + four[3]);
}

template <int R, int C>
struct DotAccumulators {
  __m512 acc[R][C];
};

template <int R, int C>
inline void dot_products(Index k, const float* a, Index lda, const float* b, Index ldb,
                         DotAccumulators<R, C>& sums) {
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < C; ++j)
      sums.acc[i][j] = _mm512_setzero_ps();
  }
  Index p = 0;
  for (; p + 16 <= k; p += 16) {
    __m512 bv[C];
    for (int j = 0; j < C; ++j)
      bv[j] = _mm512_loadu_ps(b + j * ldb + p);
    for (int i = 0; i < R; ++i) {
      const __m512 av = _mm512_loadu_ps(a + i * lda + p);
      for (int j = 0; j < C; ++j)
        sums.acc[i][j] = _mm512_fmadd_ps(av, bv[j], sums.acc[i][j]);
    }
  }
  if (p == k) return;
  // The last k % 16 products, zeros in the other lanes: the same steps as a whole vector's.
  const __mmask16 valid = lanes_below(k, p);
  __m512 bv[C];
  for (int j = 0; j < C; ++j)
    bv[j] = _mm512_maskz_loadu_ps(valid, b + j * ldb + p);
  for (int i = 0; i < R; ++i) {
    const __m512 av = _mm512_maskz_loadu_ps(valid, a + i * lda + p);
    for (int j = 0; j < C; ++j)
      sums.acc[i][j] = _mm512_fmadd_ps(av, bv[j], sums.acc[i][j]);
  }
}

// One R x C tile (R, C <= kDotTile) of c. Each element's sum runs the same steps in every
// instantiation, so edge tiles give the bits a whole one would.
template <int R, int C>
void dot_tile(Index k, const float* a, Index lda, const float* b, Index ldb, float alpha,
              float beta, float* c, Index ldc) {
  DotAccumulators<R, C> sums;
  dot_products(k, a, lda, b, ldb, sums);
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < C; ++j) {
      float& out = c[i * ldc + j];
      out = scale_and_add(sum_lanes(sums.acc[i][j]), alpha, beta, out);
    }
  }
}

using DotTile = void (*)(Index, const float*, Index, const float*, Index, float, float, float*,
                         Index);

template <int R>
constexpr std::array<DotTile, kDotTile> dot_tiles_of_height() {
  return {&dot_tile<R, 1>, &dot_tile<R, 2>, &dot_tile<R, 3>, &dot_tile<R, 4>};
}

// kDotTiles[rows - 1][columns - 1].
constexpr std::array<std::array<DotTile, kDotTile>, kDotTile> kDotTiles = {
    dot_tiles_of_height<1>(), dot_tiles_of_height<2>(), dot_tiles_of_height<3>(),
    dot_tiles_of_height<4>()};

// b's n rows are copied first, each to a cache-line boundary (a row per 16 floats of k): the
// kernel loads every vector of b once per product, and a vector split across two lines costs
// two loads (50 x 20 x 400 ran at 90 GFLOP/s from a 16-byte-aligned b, 130 from a 64-byte one).
void dot_gemm(Index m, Index n, Index k, float alpha, const float* a, Index lda, const float* b,
              Index ldb, float beta, float* c, Index ldc, PackBuffer& buffer) {
  const Index row = round_up(k, 16);
  float* aligned_b = buffer.floats(n * row);
  for (Index j = 0; j < n; ++j)
    std::copy(b + j * ldb, b + j * ldb + k, aligned_b + j * row);
  b = aligned_b;
  ldb = row;
  for (Index i = 0; i < m; i += kDotTile) {
    const Index rows = std::min(kDotTile, m - i);
    for (Index j = 0; j < n; j += kDotTile) {
      const Index columns = std::min(kDotTile, n - j);
      kDotTiles[rows - 1][columns - 1](k, a + i * lda, lda, b + j * ldb, ldb, alpha, beta,
                                       c + i * ldc + j, ldc);
    }
  }
}

}  // namespace

bool packed_gemm_available() {
  return true;
}

std::int64_t packed_a_floats(int m, int k) {
  return round_up(m, kRows) * std::int64_t{k};
}

void pack_whole_a(bool transpose_a, int m, int k, const float* a, int lda, float* out) {
  // Depth block pc at pc * round_up(m, kRows), its rows' panels in order: the main loop finds
  // the block of rows ic at ic * kc within it, as pack_a would have written it.
  for (Index pc = 0; pc < k; pc += kDepth) {
    const Index kc = std::min<Index>(kDepth, k - pc);
    pack_a(transpose_a, a, lda, 0, m, pc, kc, out + pc * round_up(m, kRows));
  }
}

void packed_gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc,
                 const float* packed_a) {
  static thread_local PackBuffer a_buffer, b_buffer;
  if (!transpose_a && transpose_b && n < kColumns) {
    dot_gemm(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, b_buffer);
    return;
  }
  for (Index jc = 0; jc < n; jc += kBlockColumns) {
    const Index nc = std::min<Index>(kBlockColumns, n - jc);
    for (Index pc = 0; pc < k; pc += kDepth) {
      const Index kc = std::min<Index>(kDepth, k - pc);
      const PanelsOfB panels(transpose_b, b, ldb, pc, kc, jc, nc,
                             b_buffer.floats(PanelsOfB::packed_floats(transpose_b, kc, nc)));
      // The first depth block applies beta; the later ones add to what it left.
      const float beta_here = pc == 0 ? beta : 1.0f;
      for (Index ic = 0; ic < m; ic += kBlockRows) {
        const Index mc = std::min<Index>(kBlockRows, m - ic);
        const float* a_packed = packed_a + pc * round_up(m, kRows) + ic * kc;
        if (packed_a == nullptr) {
          float* buffer = a_buffer.floats(kc * round_up(mc, kRows));
          pack_a(transpose_a, a, lda, ic, mc, pc, kc, buffer);
          a_packed = buffer;
        }
        for (Index jr = 0; jr < nc; jr += kColumns) {
          const Index columns = std::min(kColumns, nc - jr);
          for (Index ir = 0; ir < mc; ir += kRows) {
            const Index rows = std::min(kRows, mc - ir);
            Tile tile;
            multiply_panels(kc, a_packed + ir * kc, panels.panel(jr), panels.stride(jr), tile);
            store_tile(tile, rows, columns, alpha, beta_here, c + (ic + ir) * ldc + jc + jr, ldc);
          }
        }
      }
    }
  }
}

#else

bool packed_gemm_available() {
  return false;
}

void packed_gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float,
                 float*, int, const float*) {
  fail("packed_gemm: this build has no AVX-512 (it was not compiled for such a CPU)");
}

std::int64_t packed_a_floats(int, int) {
  fail("packed_gemm: this build has no AVX-512 (it was not compiled for such a CPU)");
}

void pack_whole_a(bool, int, int, const float*, int, float*) {
  fail("packed_gemm: this build has no AVX-512 (it was not compiled for such a CPU)");
}

#endif

}  // namespace alloy::cpu
