#include "core/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/cpu/element_access.h"
#include "core/ops/cpu/parallel.h"
#include "core/ops/gemm.h"

namespace alloy::cpu {

namespace {

// Query rows and keys per block: a block's scores live in a kBlock x kBlock array, never a
// T x T matrix, and its products are GEMMs (gemm_serial: this thread, a fixed order).
constexpr std::int64_t kBlock = 64;

// One head of one sequence, widened to fp32 [T, D] arrays: the unit of work of both passes, so
// every sum runs in the same order whichever thread takes the head.
struct Head {
  Head(const AttentionGeometry& g, std::int64_t b, std::int64_t h)
      : time(g.time),
        dim(g.head_dim),
        width(g.heads * g.head_dim),
        row_offset(b * g.time),
        column(h * g.head_dim) {}

  // Rows of `part` (0: q, 1: k, 2: v) of the qkv tensor.
  void load_qkv(const void* qkv, DType dtype, int part, std::vector<float>& out) const {
    load(qkv, dtype, 3 * width, part * width + column, out);
  }
  // Rows of a [B, T, C] tensor (y, dy).
  void load_rows(const void* data, DType dtype, std::vector<float>& out) const {
    load(data, dtype, width, column, out);
  }
  void store_rows(const std::vector<float>& values, void* data, DType dtype, std::int64_t stride,
                  std::int64_t offset) const {
    for (std::int64_t t = 0; t < time; ++t)
      for (std::int64_t d = 0; d < dim; ++d)
        store_element(data, dtype, (row_offset + t) * stride + offset + d,
                      values[static_cast<std::size_t>(t * dim + d)]);
  }

  std::int64_t time, dim, width, row_offset, column;

 private:
  void load(const void* data, DType dtype, std::int64_t stride, std::int64_t offset,
            std::vector<float>& out) const {
    out.resize(static_cast<std::size_t>(time * dim));
    for (std::int64_t t = 0; t < time; ++t)
      for (std::int64_t d = 0; d < dim; ++d)
        out[static_cast<std::size_t>(t * dim + d)] =
            load_element(data, dtype, (row_offset + t) * stride + offset + d);
  }
};

float dot(const float* a, const float* b, std::int64_t n) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}

template <class Body>
void for_each_head(const AttentionGeometry& g, const Body& body) {
  parallel_ranges(g.batch * g.heads, g.time * g.time * g.head_dim,
                  [&](std::int64_t begin, std::int64_t end) {
                    for (std::int64_t i = begin; i < end; ++i)
                      body(i / g.heads, i % g.heads);
                  });
}

}  // namespace

void attention_forward(const void* qkv, DType dtype, const AttentionGeometry& g, void* y,
                       float* lse, const AttentionDropoutBits& dropout) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  const bool drops = dropout.step != nullptr;
  const auto step = drops ? static_cast<std::uint32_t>(dropout.step[0]) : 0u;
  for_each_head(g, [&](std::int64_t b, std::int64_t h) {
    const Head head(g, b, h);
    const std::int64_t dim = g.head_dim;
    const int d = static_cast<int>(dim);
    std::vector<float> q, k, v, out(static_cast<std::size_t>(g.time * dim));
    head.load_qkv(qkv, dtype, 0, q);
    head.load_qkv(qkv, dtype, 1, k);
    head.load_qkv(qkv, dtype, 2, v);
    std::vector<float> scores(static_cast<std::size_t>(kBlock * kBlock));
    float m[kBlock], l[kBlock];
    for (std::int64_t i0 = 0; i0 < g.time; i0 += kBlock) {
      const std::int64_t rows = std::min(kBlock, g.time - i0);
      float* acc = out.data() + i0 * dim;
      std::fill(acc, acc + rows * dim, 0.0f);
      std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
      std::fill(l, l + rows, 0.0f);
      // Key blocks up to the block's last row; blocks of keys and rows share their edges, so
      // every row of the block sees at least one key of each block it visits.
      for (std::int64_t j0 = 0; j0 < i0 + rows; j0 += kBlock) {
        const std::int64_t keys = std::min(kBlock, i0 + rows - j0);
        gemm_serial(false, true, static_cast<int>(rows), static_cast<int>(keys), d, scale,
                    q.data() + i0 * dim, d, k.data() + j0 * dim, d, 0.0f, scores.data(),
                    static_cast<int>(kBlock));
        for (std::int64_t r = 0; r < rows; ++r) {
          float* row = scores.data() + r * kBlock;
          const std::int64_t visible = std::min(keys, i0 + r - j0 + 1);
          float block_max = -std::numeric_limits<float>::infinity();
          for (std::int64_t j = 0; j < visible; ++j)
            block_max = std::max(block_max, row[j]);
          const float m_new = std::max(m[r], block_max);
          const float alpha = std::exp(m[r] - m_new);  // 0 for the first block (m = -inf)
          float block_sum = 0.0f;
          for (std::int64_t j = 0; j < keys; ++j) {
            row[j] = j < visible ? std::exp(row[j] - m_new) : 0.0f;
            block_sum += row[j];
          }
          l[r] = l[r] * alpha + block_sum;
          m[r] = m_new;
          for (std::int64_t c = 0; c < dim; ++c)
            acc[r * dim + c] *= alpha;
          if (drops) {  // after the sum: the softmax normalises over every key
            for (std::int64_t j = 0; j < visible; ++j)
              row[j] *= attention_keep_factor(dropout, step, b, h, i0 + r, j0 + j, g.time);
          }
        }
        gemm_serial(false, false, static_cast<int>(rows), d, static_cast<int>(keys), 1.0f,
                    scores.data(), static_cast<int>(kBlock), v.data() + j0 * dim, d, 1.0f, acc, d);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        const float inverse = 1.0f / l[r];
        for (std::int64_t c = 0; c < dim; ++c)
          acc[r * dim + c] *= inverse;
        if (lse != nullptr) lse[(b * g.heads + h) * g.time + i0 + r] = m[r] + std::log(l[r]);
      }
    }
    head.store_rows(out, y, dtype, head.width, head.column);
  });
}

void attention_backward(const void* dy, const void* qkv, const void* y, const float* lse,
                        DType dtype, const AttentionGeometry& g, void* dqkv,
                        const AttentionDropoutBits& dropout) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  const bool drops = dropout.step != nullptr;
  const auto step = drops ? static_cast<std::uint32_t>(dropout.step[0]) : 0u;
  for_each_head(g, [&](std::int64_t b, std::int64_t h) {
    const Head head(g, b, h);
    const std::int64_t dim = g.head_dim;
    const int d = static_cast<int>(dim);
    const int ld = static_cast<int>(kBlock);
    const auto size = static_cast<std::size_t>(g.time * dim);
    std::vector<float> q, k, v, grad, out;
    head.load_qkv(qkv, dtype, 0, q);
    head.load_qkv(qkv, dtype, 1, k);
    head.load_qkv(qkv, dtype, 2, v);
    head.load_rows(dy, dtype, grad);
    head.load_rows(y, dtype, out);
    std::vector<float> dq(size, 0.0f), dk(size, 0.0f), dv(size, 0.0f);
    std::vector<float> delta(static_cast<std::size_t>(g.time));
    for (std::int64_t t = 0; t < g.time; ++t)
      delta[static_cast<std::size_t>(t)] = dot(grad.data() + t * dim, out.data() + t * dim, dim);
    const float* row_lse = lse + (b * g.heads + h) * g.time;
    std::vector<float> p(static_cast<std::size_t>(kBlock * kBlock));
    std::vector<float> ds(p.size());
    // Key blocks outermost, then the row blocks that see them, in order: each sum runs in one
    // fixed order, and a block's k and v stay in cache while every row block passes.
    for (std::int64_t j0 = 0; j0 < g.time; j0 += kBlock) {
      const std::int64_t keys = std::min(kBlock, g.time - j0);
      const int n = static_cast<int>(keys);
      for (std::int64_t i0 = j0; i0 < g.time; i0 += kBlock) {
        const std::int64_t rows = std::min(kBlock, g.time - i0);
        const int m = static_cast<int>(rows);
        gemm_serial(false, true, m, n, d, scale, q.data() + i0 * dim, d, k.data() + j0 * dim, d,
                    0.0f, p.data(), ld);
        gemm_serial(false, true, m, n, d, 1.0f, grad.data() + i0 * dim, d, v.data() + j0 * dim, d,
                    0.0f, ds.data(), ld);
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t t = i0 + r;
          const std::int64_t visible = std::min(keys, t - j0 + 1);
          float* pr = p.data() + r * kBlock;
          float* dsr = ds.data() + r * kBlock;
          for (std::int64_t j = 0; j < keys; ++j) {
            const float p_tj = j < visible ? std::exp(pr[j] - row_lse[t]) : 0.0f;
            const float z = drops && j < visible
                                ? attention_keep_factor(dropout, step, b, h, t, j0 + j, g.time)
                                : 1.0f;
            pr[j] = p_tj * z;  // what the forward multiplied v by
            dsr[j] = p_tj * (z * dsr[j] - delta[static_cast<std::size_t>(t)]);
          }
        }
        gemm_serial(true, false, n, d, m, 1.0f, p.data(), ld, grad.data() + i0 * dim, d, 1.0f,
                    dv.data() + j0 * dim, d);
        gemm_serial(true, false, n, d, m, 1.0f, ds.data(), ld, q.data() + i0 * dim, d, 1.0f,
                    dk.data() + j0 * dim, d);
        gemm_serial(false, false, m, d, n, 1.0f, ds.data(), ld, k.data() + j0 * dim, d, 1.0f,
                    dq.data() + i0 * dim, d);
      }
    }
    for (std::size_t i = 0; i < size; ++i) {
      dq[i] *= scale;
      dk[i] *= scale;
    }
    const std::int64_t stride = 3 * head.width;
    head.store_rows(dq, dqkv, dtype, stride, head.column);
    head.store_rows(dk, dqkv, dtype, stride, head.width + head.column);
    head.store_rows(dv, dqkv, dtype, stride, 2 * head.width + head.column);
  });
}

}  // namespace alloy::cpu
