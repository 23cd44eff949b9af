#include "core/ops/layer_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/cpu/float_block.h"
#include "core/ops/cpu/parallel.h"

namespace alloy::cpu {

namespace {

// A row's sums run in fp32 over independent lanes (which the compiler vectorises), the lanes
// added in order: the same order whatever thread takes the row.
constexpr std::int64_t kLanes = 16;

template <class Term>
float row_sum(std::int64_t count, const Term& term) {
  float lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (std::int64_t lane = 0; lane < kLanes; ++lane)
      lanes[lane] += term(i + lane);
  }
  for (std::int64_t lane = 0; i < count; ++i, ++lane)
    lanes[lane] += term(i);
  float total = 0.0f;
  for (const float lane : lanes)
    total += lane;
  return total;
}

// The parameter gradients sum over blocks of rows whose size depends on the row count alone
// (at least kBlockRows rows, at most kMaxBlocks blocks), so the partials and their joining
// order are the same on any number of threads.
constexpr std::int64_t kBlockRows = 32;
constexpr std::int64_t kMaxBlocks = 256;

std::int64_t rows_per_block(std::int64_t rows) {
  return std::max(kBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
}

// fp32 scratch for one row of each of three tensors.
struct RowScratch {
  explicit RowScratch(std::int64_t features)
      : a(static_cast<std::size_t>(features)),
        b(static_cast<std::size_t>(features)),
        c(static_cast<std::size_t>(features)) {}
  std::vector<float> a, b, c;
};

}  // namespace

void layer_norm_forward(const void* x, DType x_dtype, const LayerNormGeometry& g,
                        const float* weight, const float* bias, float eps, void* y, float* mean,
                        float* rstd) {
  const std::int64_t d = g.features;
  const float count = static_cast<float>(d);
  parallel_ranges(g.rows, d, [&](std::int64_t begin, std::int64_t end) {
    RowScratch scratch(d);
    for (std::int64_t row = begin; row < end; ++row) {
      const float* in = load_floats(x, x_dtype, row * d, d, scratch.a.data());
      float* out = output_floats(y, x_dtype, row * d, scratch.b.data());
      const float m = row_sum(d, [in](std::int64_t j) { return in[j]; }) / count;
      // Deviations from the mean, not E[x^2] - mean^2, which cancels badly.
      const float variance = row_sum(d,
                                     [in, m](std::int64_t j) {
                                       const float dev = in[j] - m;
                                       return dev * dev;
                                     }) /
                             count;
      const float r = 1.0f / std::sqrt(variance + eps);
      for (std::int64_t j = 0; j < d; ++j)
        out[j] = ((in[j] - m) * r) * weight[j] + bias[j];
      store_floats(out, y, x_dtype, row * d, d);
      if (mean != nullptr) mean[row] = m;
      if (rstd != nullptr) rstd[row] = r;
    }
  });
}

void layer_norm_backward(const void* dy, DType dy_dtype, const void* x, DType x_dtype,
                         const LayerNormGeometry& g, const float* weight, const float* mean,
                         const float* rstd, void* dx, float* dweight, float* dbias) {
  const std::int64_t d = g.features;
  const float count = static_cast<float>(d);
  const std::int64_t block_rows = rows_per_block(g.rows);
  const std::int64_t blocks = (g.rows + block_rows - 1) / block_rows;
  // Per block: d partial sums of dy * xhat, then d of dy.
  std::vector<float> partials(static_cast<std::size_t>(blocks * 2 * d), 0.0f);
  parallel_ranges(blocks, block_rows * d, [&](std::int64_t first, std::int64_t last) {
    RowScratch scratch(d);
    for (std::int64_t block = first; block < last; ++block) {
      float* dw = partials.data() + block * 2 * d;
      float* db = dw + d;
      const std::int64_t end = std::min(g.rows, (block + 1) * block_rows);
      for (std::int64_t row = block * block_rows; row < end; ++row) {
        const float* xv = load_floats(x, x_dtype, row * d, d, scratch.a.data());
        const float* gv = load_floats(dy, dy_dtype, row * d, d, scratch.b.data());
        float* out = output_floats(dx, dy_dtype, row * d, scratch.c.data());
        const float m = mean[row];
        const float r = rstd[row];
        const float a = row_sum(d, [&](std::int64_t j) { return gv[j] * weight[j]; }) / count;
        const float c =
            row_sum(d, [&](std::int64_t j) { return (gv[j] * weight[j]) * ((xv[j] - m) * r); }) /
            count;
        for (std::int64_t j = 0; j < d; ++j) {
          const float xhat = (xv[j] - m) * r;
          dw[j] += gv[j] * xhat;
          db[j] += gv[j];
          out[j] = r * ((gv[j] * weight[j] - a) - xhat * c);
        }
        store_floats(out, dx, dy_dtype, row * d, d);
      }
    }
  });
  for (std::int64_t j = 0; j < d; ++j) {
    double total_dw = 0.0, total_db = 0.0;
    for (std::int64_t block = 0; block < blocks; ++block) {
      total_dw += partials[static_cast<std::size_t>(block * 2 * d + j)];
      total_db += partials[static_cast<std::size_t>(block * 2 * d + d + j)];
    }
    dweight[j] += static_cast<float>(total_dw);
    dbias[j] += static_cast<float>(total_db);
  }
}

}  // namespace alloy::cpu
