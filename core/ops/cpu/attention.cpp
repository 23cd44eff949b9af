#include "core/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/float_math.h"
#include "core/ops/cpu/convert.h"
#include "core/ops/cpu/float_lanes.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

using Index = std::int64_t;
using Lanes = FloatLanes8;
constexpr Index kLanes = 8;
// A register tile: kRows query rows by kKeys keys of scores (two vectors each), 8 accumulators,
// half of AVX2's registers. Each block of kRows rows sees only the keys up to its last row, so
// the causal mask skips all but a sliver of the masked products. The blocks of a head were
// 64 x 64 GEMMs through OpenBLAS before: at head size 32 the calls' overhead and the masked half
// of every product cost more than the arithmetic (attention took a fifth of a small GPT's step).
constexpr Index kRows = 4;
constexpr Index kKeys = 2 * kLanes;

Index round_up(Index value, Index multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// One head of one sequence in fp32 arrays of `rows` x `dim`: the real rows and columns, then
// zeros to whole tiles (a zero column adds nothing to a dot product, a zero row is no key).
struct HeadLayout {
  explicit HeadLayout(const AttentionGeometry& g)
      : time(g.time),
        head_dim(g.head_dim),
        dim(round_up(g.head_dim, kLanes)),
        rows(round_up(g.time, kKeys)),
        width(g.heads * g.head_dim) {}
  Index size() const { return rows * dim; }

  Index time, head_dim, dim, rows, width;
};

// Where head (b, h)'s rows lie in a [B, T, stride] tensor, from column `offset` on.
struct HeadRows {
  Index stride, offset, first_row;
};

void load_head(const void* data, DType dtype, HeadRows where, const HeadLayout& l, float* out) {
  std::fill(out, out + l.size(), 0.0f);
  for (Index t = 0; t < l.time; ++t) {
    const Index first = (where.first_row + t) * where.stride + where.offset;
    if (dtype == DType::f32) {
      std::memcpy(out + t * l.dim, static_cast<const float*>(data) + first,
                  static_cast<std::size_t>(l.head_dim) * sizeof(float));
    } else {
      widen_16(static_cast<const std::uint16_t*>(data) + first, dtype, out + t * l.dim, l.head_dim);
    }
  }
}

void store_head(const float* values, void* data, DType dtype, HeadRows where, const HeadLayout& l) {
  for (Index t = 0; t < l.time; ++t) {
    const Index first = (where.first_row + t) * where.stride + where.offset;
    if (dtype == DType::f32) {
      std::memcpy(static_cast<float*>(data) + first, values + t * l.dim,
                  static_cast<std::size_t>(l.head_dim) * sizeof(float));
    } else {
      narrow_16(values + t * l.dim, static_cast<std::uint16_t*>(data) + first, dtype, l.head_dim);
    }
  }
}

// out (dim x rows) = in (rows x dim) transposed: the keys' components along vectors.
void transpose_head(const float* __restrict in, const HeadLayout& l, float* __restrict out) {
  for (Index t = 0; t < l.rows; ++t)
    for (Index d = 0; d < l.dim; ++d)
      out[d * l.rows + t] = in[t * l.dim + d];
}

// s[r][j] = scale * (a_r . b_j) for the kRows rows of a from `a` on and the keys j < keys (and
// on to the tile's end), each sum over d in order; bt holds the keys transposed, s rows of ld.
void score_rows(const float* __restrict a, const float* __restrict bt, const HeadLayout& l,
                Index keys, float scale, float* __restrict s, Index ld) {
  for (Index j = 0; j < keys; j += kKeys) {
    Lanes acc[kRows][2] = {};
    for (Index d = 0; d < l.dim; ++d) {
      const float* b = bt + d * l.rows + j;
      const Lanes b0 = load_lanes<Lanes>(b), b1 = load_lanes<Lanes>(b + kLanes);
      for (Index r = 0; r < kRows; ++r) {
        const float x = a[r * l.dim + d];
        acc[r][0] += x * b0;
        acc[r][1] += x * b1;
      }
    }
    for (Index r = 0; r < kRows; ++r) {
      store_lanes(s + r * ld + j, acc[r][0] * scale);
      store_lanes(s + r * ld + j + kLanes, acc[r][1] * scale);
    }
  }
}

// out[r] += sum_{j < keys} p[r][j] b_j over C vectors of columns, j in order.
template <int C>
void accumulate_tile(const float* __restrict p, Index ld, const float* __restrict b, Index dim,
                     Index keys, float* __restrict out) {
  Lanes acc[kRows][C];
  for (Index r = 0; r < kRows; ++r)
    for (int c = 0; c < C; ++c)
      acc[r][c] = load_lanes<Lanes>(out + r * dim + c * kLanes);
  for (Index j = 0; j < keys; ++j) {
    Lanes bv[C];
    for (int c = 0; c < C; ++c)
      bv[c] = load_lanes<Lanes>(b + j * dim + c * kLanes);
    for (Index r = 0; r < kRows; ++r) {
      const float x = p[r * ld + j];
      for (int c = 0; c < C; ++c)
        acc[r][c] += x * bv[c];
    }
  }
  for (Index r = 0; r < kRows; ++r)
    for (int c = 0; c < C; ++c)
      store_lanes(out + r * dim + c * kLanes, acc[r][c]);
}

// The kRows rows of out (row stride dim) += p (kRows x keys) times b (keys x dim).
void accumulate_rows(const float* p, Index ld, const float* b, Index dim, Index keys, float* out) {
  Index c = 0;
  for (; c + 2 * kLanes <= dim; c += 2 * kLanes)
    accumulate_tile<2>(p, ld, b + c, dim, keys, out + c);
  if (c < dim) accumulate_tile<1>(p, ld, b + c, dim, keys, out + c);
}

// out_j += sum_r p[r][j] a_r over C vectors of columns for j < keys, the kRows rows r in order:
// the keys' side of backward. Each p[r][j] is broadcast once for the C vectors.
template <int C>
void accumulate_column_tile(const float* __restrict p, Index ld, const float* __restrict a,
                            Index dim, Index keys, float* __restrict out) {
  Lanes av[kRows][C];
  for (Index r = 0; r < kRows; ++r)
    for (int c = 0; c < C; ++c)
      av[r][c] = load_lanes<Lanes>(a + r * dim + c * kLanes);
  for (Index j = 0; j < keys; ++j) {
    Lanes o[C];
    for (int c = 0; c < C; ++c)
      o[c] = load_lanes<Lanes>(out + j * dim + c * kLanes);
    for (Index r = 0; r < kRows; ++r) {
      const float x = p[r * ld + j];
      for (int c = 0; c < C; ++c)
        o[c] += x * av[r][c];
    }
    for (int c = 0; c < C; ++c)
      store_lanes(out + j * dim + c * kLanes, o[c]);
  }
}

void accumulate_columns(const float* p, Index ld, const float* a, Index dim, Index keys,
                        float* out) {
  Index c = 0;
  for (; c + 2 * kLanes <= dim; c += 2 * kLanes)
    accumulate_column_tile<2>(p, ld, a + c, dim, keys, out + c);
  if (c < dim) accumulate_column_tile<1>(p, ld, a + c, dim, keys, out + c);
}

// The helpers' arrays never overlap (__restrict): otherwise each store into a sum reloads the
// weights it read, as they might have changed.

// A thread's fp32 arrays for the heads it takes: `count` of one head's size, then `extra` floats.
class HeadArrays {
 public:
  HeadArrays(const HeadLayout& l, int count, Index extra)
      : size_(l.size()), storage_(static_cast<std::size_t>(count * l.size() + extra)) {}
  float* operator[](int index) { return storage_.data() + index * size_; }
  float* extra(int count) { return storage_.data() + count * size_; }

 private:
  Index size_;
  std::vector<float> storage_;
};

// Calls body(b, h, arrays) for every head, one HeadArrays per thread. A head is the unit of work
// of both passes, so every sum runs in the same order whichever thread takes the head.
template <class Body>
void for_each_head(const AttentionGeometry& g, int arrays, Index extra, const Body& body) {
  const HeadLayout layout(g);
  parallel_ranges(g.batch * g.heads, g.time * g.time * g.head_dim, [&](Index begin, Index end) {
    HeadArrays scratch(layout, arrays, extra);
    for (Index i = begin; i < end; ++i)
      body(i / g.heads, i % g.heads, layout, scratch);
  });
}

HeadRows qkv_rows(const HeadLayout& l, Index b, Index h, int part) {
  return {3 * l.width, part * l.width + h * l.head_dim, b * l.time};
}

HeadRows output_rows(const HeadLayout& l, Index b, Index h) {
  return {l.width, h * l.head_dim, b * l.time};
}

}  // namespace

void attention_forward(const void* qkv, DType dtype, const AttentionGeometry& g, void* y,
                       float* lse, const AttentionDropoutBits& dropout) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  const bool drops = dropout.step != nullptr;
  const auto step = drops ? static_cast<std::uint32_t>(dropout.step[0]) : 0u;
  const Index ld = round_up(g.time, kKeys);
  enum { kQ, kK, kV, kKt, kOut, kArrays };
  for_each_head(g, kArrays, kRows * ld, [&](Index b, Index h, const HeadLayout& l, HeadArrays& a) {
    float *q = a[kQ], *k = a[kK], *v = a[kV], *kt = a[kKt], *out = a[kOut];
    float* s = a.extra(kArrays);
    load_head(qkv, dtype, qkv_rows(l, b, h, 0), l, q);
    load_head(qkv, dtype, qkv_rows(l, b, h, 1), l, k);
    load_head(qkv, dtype, qkv_rows(l, b, h, 2), l, v);
    transpose_head(k, l, kt);
    std::fill(out, out + l.size(), 0.0f);
    for (Index i0 = 0; i0 < l.time; i0 += kRows) {
      const Index keys = std::min(i0 + kRows, l.time);
      score_rows(q + i0 * l.dim, kt, l, keys, scale, s, ld);
      float inverse[kRows];
      for (Index r = 0; r < kRows; ++r) {
        const Index t = i0 + r;
        float* row = s + r * ld;
        if (t >= l.time) {  // a padding row: no weights
          std::fill(row, row + keys, 0.0f);
          continue;
        }
        const Index visible = t + 1;
        float m = -std::numeric_limits<float>::infinity();
        for (Index j = 0; j < visible; ++j)
          m = std::max(m, row[j]);
        for (Index j = 0; j < keys; ++j)
          row[j] = float_select(j < visible, exp_fp32(row[j] - m), 0.0f);
        float sum = 0.0f;
        for (Index j = 0; j < visible; ++j)
          sum += row[j];
        inverse[r] = 1.0f / sum;
        if (lse != nullptr) lse[(b * g.heads + h) * g.time + t] = m + std::log(sum);
        if (drops) {  // after the sum: the softmax normalises over every key
          for (Index j = 0; j < visible; ++j)
            row[j] *= attention_keep_factor(dropout, step, b, h, t, j, g.time);
        }
      }
      accumulate_rows(s, ld, v, l.dim, keys, out + i0 * l.dim);
      for (Index r = 0; r < kRows && i0 + r < l.time; ++r)
        for (Index d = 0; d < l.dim; ++d)
          out[(i0 + r) * l.dim + d] *= inverse[r];
    }
    store_head(out, y, dtype, output_rows(l, b, h), l);
  });
}

void attention_backward(const void* dy, const void* qkv, const void* y, const float* lse,
                        DType dtype, const AttentionGeometry& g, void* dqkv,
                        const AttentionDropoutBits& dropout) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  const bool drops = dropout.step != nullptr;
  const auto step = drops ? static_cast<std::uint32_t>(dropout.step[0]) : 0u;
  const Index ld = round_up(g.time, kKeys);
  enum { kQ, kK, kV, kKt, kVt, kGrad, kOut, kDq, kDk, kDv, kArrays };
  // Extra: the tile's p and ds rows, and delta per row.
  const Index extra = 2 * kRows * ld + g.time;
  for_each_head(g, kArrays, extra, [&](Index b, Index h, const HeadLayout& l, HeadArrays& a) {
    float *q = a[kQ], *k = a[kK], *v = a[kV], *kt = a[kKt], *vt = a[kVt], *grad = a[kGrad];
    float *out = a[kOut], *dq = a[kDq], *dk = a[kDk], *dv = a[kDv];
    float* p = a.extra(kArrays);
    float* ds = p + kRows * ld;
    float* delta = ds + kRows * ld;
    load_head(qkv, dtype, qkv_rows(l, b, h, 0), l, q);
    load_head(qkv, dtype, qkv_rows(l, b, h, 1), l, k);
    load_head(qkv, dtype, qkv_rows(l, b, h, 2), l, v);
    load_head(dy, dtype, output_rows(l, b, h), l, grad);
    load_head(y, dtype, output_rows(l, b, h), l, out);
    transpose_head(k, l, kt);
    transpose_head(v, l, vt);
    std::fill(dq, dq + l.size(), 0.0f);
    std::fill(dk, dk + l.size(), 0.0f);
    std::fill(dv, dv + l.size(), 0.0f);
    for (Index t = 0; t < l.time; ++t) {
      float sum = 0.0f;
      for (Index d = 0; d < l.head_dim; ++d)
        sum += grad[t * l.dim + d] * out[t * l.dim + d];
      delta[t] = sum;
    }
    const float* row_lse = lse + (b * g.heads + h) * g.time;
    // Row blocks in order: each key's dk and dv sum their rows in one fixed order.
    for (Index i0 = 0; i0 < l.time; i0 += kRows) {
      const Index keys = std::min(i0 + kRows, l.time);
      score_rows(q + i0 * l.dim, kt, l, keys, scale, p, ld);
      score_rows(grad + i0 * l.dim, vt, l, keys, 1.0f, ds, ld);
      for (Index r = 0; r < kRows; ++r) {
        const Index t = i0 + r;
        float* pr = p + r * ld;
        float* dsr = ds + r * ld;
        if (t >= l.time) {  // a padding row: no weights, no gradient
          std::fill(pr, pr + keys, 0.0f);
          std::fill(dsr, dsr + keys, 0.0f);
          continue;
        }
        const Index visible = t + 1;
        const float lse_t = row_lse[t], delta_t = delta[t];
        for (Index j = 0; j < keys; ++j)
          pr[j] = float_select(j < visible, exp_fp32(pr[j] - lse_t), 0.0f);
        if (drops) {
          for (Index j = 0; j < keys; ++j) {
            const float z =
                j < visible ? attention_keep_factor(dropout, step, b, h, t, j, g.time) : 1.0f;
            dsr[j] = pr[j] * (z * dsr[j] - delta_t);
            pr[j] *= z;  // what the forward multiplied v by
          }
        } else {
          for (Index j = 0; j < keys; ++j)
            dsr[j] = pr[j] * (dsr[j] - delta_t);
        }
      }
      accumulate_columns(p, ld, grad + i0 * l.dim, l.dim, keys, dv);
      accumulate_columns(ds, ld, q + i0 * l.dim, l.dim, keys, dk);
      accumulate_rows(ds, ld, k, l.dim, keys, dq + i0 * l.dim);
    }
    for (Index i = 0; i < l.size(); ++i) {
      dq[i] *= scale;
      dk[i] *= scale;
    }
    store_head(dq, dqkv, dtype, qkv_rows(l, b, h, 0), l);
    store_head(dk, dqkv, dtype, qkv_rows(l, b, h, 1), l);
    store_head(dv, dqkv, dtype, qkv_rows(l, b, h, 2), l);
  });
}

}  // namespace alloy::cpu
