#include "core/ops/cpu/packed_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"

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
// `width` floats wide, zeros past `count`.
void pack_straight(const float* source, Index ld, Index count, Index depth, Index width,
                   float* out) {
  for (Index p = 0; p < depth; ++p) {
    std::copy(source + p * ld, source + p * ld + count, out + p * width);
    std::fill(out + p * width + count, out + (p + 1) * width, 0.0f);
  }
}

// Rows [row, row + rows) of op(a) over depth [p0, p0 + depth), in panels of kRows rows: for
// each p, the panel's kRows values of column p, zeros past the last row.
void pack_a(bool transpose, const float* a, Index lda, Index row, Index rows, Index p0, Index depth,
            float* out) {
  for (Index first = row; first < row + rows; first += kRows) {
    const Index count = std::min(kRows, row + rows - first);
    if (transpose) {
      pack_straight(a + p0 * lda + first, lda, count, depth, kRows, out);
    } else {
      pack_transposed(a + first * lda + p0, lda, count, depth, kRows, out);
    }
    out += depth * kRows;
  }
}

// Columns [column, column + columns) of op(b) over depth [p0, p0 + depth), in panels of
// kColumns columns: for each p, the panel's kColumns values of row p, zeros past the last.
void pack_b(bool transpose, const float* b, Index ldb, Index p0, Index depth, Index column,
            Index columns, float* out) {
  for (Index first = column; first < column + columns; first += kColumns) {
    const Index count = std::min(kColumns, column + columns - first);
    if (transpose) {
      pack_transposed(b + first * ldb + p0, ldb, count, depth, kColumns, out);
    } else {
      pack_straight(b + p0 * ldb + first, ldb, count, depth, kColumns, out);
    }
    out += depth * kColumns;
  }
}

// The register tile's products: acc = a_panel * b_panel over `depth`.
struct Tile {
  __m512 acc[kRows][2];
};

inline void multiply_panels(Index depth, const float* a, const float* b, Tile& tile) {
  for (Index i = 0; i < kRows; ++i)
    tile.acc[i][0] = tile.acc[i][1] = _mm512_setzero_ps();
  for (Index p = 0; p < depth; ++p) {
    const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
    for (Index i = 0; i < kRows; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      tile.acc[i][0] = _mm512_fmadd_ps(ai, b0, tile.acc[i][0]);
      tile.acc[i][1] = _mm512_fmadd_ps(ai, b1, tile.acc[i][1]);
    }
    a += kRows;
    b += kColumns;
  }
}

// c = alpha * product + beta * c (beta == 0: c unread), one rounding for the sum: the same
// arithmetic on the vector path and the edges' scalar one, so an element's bits do not depend
// on whether it falls in a whole tile.
inline __m512 combine(__m512 product, float alpha, float beta, const float* c) {
  const __m512 scaled = alpha == 1.0f ? product : _mm512_mul_ps(product, _mm512_set1_ps(alpha));
  if (beta == 0.0f) return scaled;
  return _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(c), scaled);
}

inline float combine(float product, float alpha, float beta, float c) {
  const float scaled = alpha == 1.0f ? product : product * alpha;
  return beta == 0.0f ? scaled : std::fma(beta, c, scaled);
}

void store_tile(const Tile& tile, float alpha, float beta, float* c, Index ldc) {
  for (Index i = 0; i < kRows; ++i) {
    float* row = c + i * ldc;
    _mm512_storeu_ps(row, combine(tile.acc[i][0], alpha, beta, row));
    _mm512_storeu_ps(row + 16, combine(tile.acc[i][1], alpha, beta, row + 16));
  }
}

void store_edge(const Tile& tile, Index rows, Index columns, float alpha, float beta, float* c,
                Index ldc) {
  alignas(64) float products[kRows][kColumns];
  for (Index i = 0; i < kRows; ++i) {
    _mm512_store_ps(products[i], tile.acc[i][0]);
    _mm512_store_ps(products[i] + 16, tile.acc[i][1]);
  }
  for (Index i = 0; i < rows; ++i) {
    for (Index j = 0; j < columns; ++j)
      c[i * ldc + j] = combine(products[i][j], alpha, beta, c[i * ldc + j]);
  }
}

}  // namespace

bool packed_gemm_available() {
  return true;
}

void packed_gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  static thread_local PackBuffer a_buffer, b_buffer;
  for (Index jc = 0; jc < n; jc += kBlockColumns) {
    const Index nc = std::min<Index>(kBlockColumns, n - jc);
    for (Index pc = 0; pc < k; pc += kDepth) {
      const Index kc = std::min<Index>(kDepth, k - pc);
      float* b_packed = b_buffer.floats(kc * round_up(nc, kColumns));
      pack_b(transpose_b, b, ldb, pc, kc, jc, nc, b_packed);
      // The first depth block applies beta; the later ones add to what it left.
      const float beta_here = pc == 0 ? beta : 1.0f;
      for (Index ic = 0; ic < m; ic += kBlockRows) {
        const Index mc = std::min<Index>(kBlockRows, m - ic);
        float* a_packed = a_buffer.floats(kc * round_up(mc, kRows));
        pack_a(transpose_a, a, lda, ic, mc, pc, kc, a_packed);
        for (Index jr = 0; jr < nc; jr += kColumns) {
          const Index columns = std::min(kColumns, nc - jr);
          for (Index ir = 0; ir < mc; ir += kRows) {
            const Index rows = std::min(kRows, mc - ir);
            Tile tile;
            multiply_panels(kc, a_packed + ir * kc, b_packed + jr * kc, tile);
            float* c_tile = c + (ic + ir) * ldc + jc + jr;
            if (rows == kRows && columns == kColumns) {
              store_tile(tile, alpha, beta_here, c_tile, ldc);
            } else {
              store_edge(tile, rows, columns, alpha, beta_here, c_tile, ldc);
            }
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
                 float*, int) {
  fail("packed_gemm: this build has no AVX-512 (it was not compiled for such a CPU)");
}

#endif

}  // namespace alloy::cpu
