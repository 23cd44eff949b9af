#include "core/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/cpu/element_access.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// Keys per block of the online softmax: a block's scores live in a small array, never a row of T.
constexpr std::int64_t kKeyBlock = 64;

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
                       float* lse) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  for_each_head(g, [&](std::int64_t b, std::int64_t h) {
    const Head head(g, b, h);
    const std::int64_t dim = g.head_dim;
    std::vector<float> q, k, v, out(static_cast<std::size_t>(g.time * dim));
    head.load_qkv(qkv, dtype, 0, q);
    head.load_qkv(qkv, dtype, 1, k);
    head.load_qkv(qkv, dtype, 2, v);
    float scores[kKeyBlock];
    for (std::int64_t t = 0; t < g.time; ++t) {
      const float* qt = q.data() + t * dim;
      float* acc = out.data() + t * dim;
      std::fill(acc, acc + dim, 0.0f);
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      for (std::int64_t j0 = 0; j0 <= t; j0 += kKeyBlock) {
        const std::int64_t keys = std::min(kKeyBlock, t + 1 - j0);
        float block_max = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < keys; ++j) {
          scores[j] = dot(qt, k.data() + (j0 + j) * dim, dim) * scale;
          block_max = std::max(block_max, scores[j]);
        }
        const float m_new = std::max(m, block_max);
        const float alpha = std::exp(m - m_new);  // 0 for the first block (m = -inf)
        float block_sum = 0.0f;
        for (std::int64_t d = 0; d < dim; ++d)
          acc[d] *= alpha;
        for (std::int64_t j = 0; j < keys; ++j) {
          const float p = std::exp(scores[j] - m_new);
          block_sum += p;
          const float* vj = v.data() + (j0 + j) * dim;
          for (std::int64_t d = 0; d < dim; ++d)
            acc[d] += p * vj[d];
        }
        l = l * alpha + block_sum;
        m = m_new;
      }
      const float inverse = 1.0f / l;
      for (std::int64_t d = 0; d < dim; ++d)
        acc[d] *= inverse;
      if (lse != nullptr) lse[(b * g.heads + h) * g.time + t] = m + std::log(l);
    }
    head.store_rows(out, y, dtype, head.width, head.column);
  });
}

void attention_backward(const void* dy, const void* qkv, const void* y, const float* lse,
                        DType dtype, const AttentionGeometry& g, void* dqkv) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(g.head_dim));
  for_each_head(g, [&](std::int64_t b, std::int64_t h) {
    const Head head(g, b, h);
    const std::int64_t dim = g.head_dim;
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
    // Key blocks outermost, so a block's k and v rows stay in cache while every query row that
    // sees them passes; each sum still runs in one fixed order (blocks, then rows, then keys).
    for (std::int64_t j0 = 0; j0 < g.time; j0 += kKeyBlock) {
      const std::int64_t j_end = std::min(g.time, j0 + kKeyBlock);
      for (std::int64_t t = j0; t < g.time; ++t) {
        const float* qt = q.data() + t * dim;
        const float* gt = grad.data() + t * dim;
        float* dqt = dq.data() + t * dim;
        const std::int64_t last = std::min(j_end, t + 1);
        for (std::int64_t j = j0; j < last; ++j) {
          const float* kj = k.data() + j * dim;
          const float* vj = v.data() + j * dim;
          const float p = std::exp(dot(qt, kj, dim) * scale - row_lse[t]);
          const float ds = p * (dot(gt, vj, dim) - delta[static_cast<std::size_t>(t)]);
          float* dkj = dk.data() + j * dim;
          float* dvj = dv.data() + j * dim;
          for (std::int64_t d = 0; d < dim; ++d) {
            dvj[d] += p * gt[d];
            dkj[d] += ds * qt[d];
            dqt[d] += ds * kj[d];
          }
        }
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
