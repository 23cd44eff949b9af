#include "core/ops/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/ops/cpu/packed_gemm.h"
#include "core/thread_pool.h"

namespace alloy::cpu {

namespace {

// The kernels parallelise over alloy's pool themselves; OpenBLAS threads would only compete
// with it for the same cores and make the split of work depend on OpenBLAS's heuristics.
void use_single_blas_thread() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// Below this many flops a fork/join costs more than it saves.
constexpr double kParallelAboveFlops = 4.0e6;
// Threads split c into blocks of at least 16 rows or 32 columns, at multiples of those, so each
// gets whole register tiles of the kernels (packed_gemm's are 8 x 32); the last block takes the
// remainder. packed_gemm picks its kernel by n, and no column block is narrower than 32, so a
// column of c gets the kernel at any thread count that it gets on one.
constexpr int kRowSplit = 16;
constexpr int kColumnSplit = 32;

CBLAS_TRANSPOSE blas_op(bool transpose) {
  return transpose ? CblasTrans : CblasNoTrans;
}

}  // namespace

const char* gemm_kernels() {
  return packed_gemm_available() ? "alloy-avx512" : "openblas";
}

void gemm_serial(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // no products: c = beta * c, where beta == 0 clears NaN too
    for (int i = 0; i < m; ++i) {
      float* row = c + static_cast<std::int64_t>(i) * ldc;
      for (int j = 0; j < n; ++j)
        row[j] = beta == 0.0f ? 0.0f : beta * row[j];
    }
    return;
  }
  if (packed_gemm_available()) {
    packed_gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  use_single_blas_thread();
  cblas_sgemm(CblasRowMajor, blas_op(transpose_a), blas_op(transpose_b), m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

GemmLeft::GemmLeft(bool transpose, int m, int k, const float* a, int lda)
    : transpose_(transpose), m_(m), k_(k), a_(a), lda_(lda) {
  if (!packed_gemm_available() || m <= 0 || k <= 0) return;
  packed_ =
      Tensor::empty({packed_a_floats(m, k)}, DType::f32, Device::cpu(), MemoryCategory::workspace);
  pack_whole_a(transpose, m, k, a, lda, packed_.data<float>());
}

const float* GemmLeft::packed() const {
  return packed_.defined() ? packed_.data<float>() : nullptr;
}

void gemm_serial(const GemmLeft& a, bool transpose_b, int n, float alpha, const float* b, int ldb,
                 float beta, float* c, int ldc) {
  if (a.packed() == nullptr || n <= 0) {
    gemm_serial(a.transpose(), transpose_b, a.m(), n, a.k(), alpha, a.a(), a.lda(), b, ldb, beta, c,
                ldc);
    return;
  }
  packed_gemm(a.transpose(), transpose_b, a.m(), n, a.k(), alpha, a.a(), a.lda(), b, ldb, beta, c,
              ldc, a.packed());
}

namespace {

// A call split into blocks of c: rows of kRowSplit or columns of kColumnSplit, the last block
// taking the remainder.
struct SplitCall {
  explicit SplitCall(const GemmCall& call)
      : call(call),
        split_rows(call.m >= call.n),
        extent(split_rows ? call.m : call.n),
        split(split_rows ? kRowSplit : kColumnSplit),
        blocks(std::max<std::int64_t>(extent / split, 1)) {}

  double flops() const { return 2.0 * call.m * call.n * call.k; }

  // Blocks [begin, end) on the calling thread.
  void run(std::int64_t begin, std::int64_t end) const {
    if (begin >= end) return;
    const std::int64_t first = begin * split;
    const int count = static_cast<int>((end == blocks ? extent : end * split) - first);
    const GemmCall& g = call;
    if (split_rows) {
      const float* a_rows = g.a + (g.transpose_a ? first : first * g.lda);
      gemm_serial(g.transpose_a, g.transpose_b, count, g.n, g.k, g.alpha, a_rows, g.lda, g.b, g.ldb,
                  g.beta, g.c + first * g.ldc, g.ldc);
    } else {
      const float* b_columns = g.b + (g.transpose_b ? first * g.ldb : first);
      gemm_serial(g.transpose_a, g.transpose_b, g.m, count, g.k, g.alpha, g.a, g.lda, b_columns,
                  g.ldb, g.beta, g.c + first, g.ldc);
    }
  }

  const GemmCall& call;
  bool split_rows;
  std::int64_t extent;
  int split;
  std::int64_t blocks;
};

}  // namespace

void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  gemm(GemmCall{transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc});
}

void gemm(const GemmCall& call) {
  const SplitCall split(call);
  if (cpu_threads() == 1 || split.blocks < 2 || split.flops() < kParallelAboveFlops) {
    split.run(0, split.blocks);
    return;
  }
  cpu_pool().parallel_for(
      split.blocks, [&](std::int64_t begin, std::int64_t end, int) { split.run(begin, end); });
}

void gemm_pair(const GemmCall& first, const GemmCall& second) {
  const SplitCall one(first), two(second);
  const int threads = cpu_threads();
  if (threads == 1) {
    one.run(0, one.blocks);
    two.run(0, two.blocks);
    return;
  }
  // Threads in proportion to the flops, at least one each.
  const double share = one.flops() / std::max(one.flops() + two.flops(), 1.0);
  const int first_threads =
      std::clamp(static_cast<int>(std::lround(threads * share)), 1, threads - 1);
  cpu_pool().parallel_for(threads, [&](std::int64_t thread, std::int64_t, int) {
    const bool in_first = thread < first_threads;
    const SplitCall& call = in_first ? one : two;
    const int index = static_cast<int>(in_first ? thread : thread - first_threads);
    std::int64_t begin = 0, end = 0;
    chunk_range(call.blocks, in_first ? first_threads : threads - first_threads, index, begin, end);
    call.run(begin, end);
  });
}

}  // namespace alloy::cpu
