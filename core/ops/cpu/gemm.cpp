#include "core/ops/gemm.h"

#include <cblas.h>

#include <algorithm>
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

void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const bool split_rows = m >= n;
  const int extent = split_rows ? m : n;
  const int split = split_rows ? kRowSplit : kColumnSplit;
  const std::int64_t blocks = extent / split;
  const double flops = 2.0 * m * n * k;
  if (cpu_threads() == 1 || blocks < 2 || flops < kParallelAboveFlops) {
    gemm_serial(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  cpu_pool().parallel_for(blocks, [&](std::int64_t begin, std::int64_t end, int) {
    const std::int64_t first = begin * split;
    const int count = static_cast<int>((end == blocks ? extent : end * split) - first);
    if (split_rows) {
      const float* a_rows = a + (transpose_a ? first : first * lda);
      gemm_serial(transpose_a, transpose_b, count, n, k, alpha, a_rows, lda, b, ldb, beta,
                  c + first * ldc, ldc);
    } else {
      const float* b_columns = b + (transpose_b ? first * ldb : first);
      gemm_serial(transpose_a, transpose_b, m, count, k, alpha, a, lda, b_columns, ldb, beta,
                  c + first, ldc);
    }
  });
}

}  // namespace alloy::cpu
