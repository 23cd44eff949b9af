// General matrix multiply: c = alpha * op(a) * op(b) + beta * c, with op(x) = x or x^T.
// a, b and c share one floating dtype; products accumulate in fp32 and the result is rounded
// to c's dtype once (the numerics contract's "half inputs, fp32 accumulation").
#pragma once

#include "core/tensor.h"

namespace alloy {

struct GemmShape {
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 0 ignores c's old contents, NaN included
};

// a: [M, K] (or [K, M] transposed), b: [K, N] (or [N, K]), c: [M, N], all 2-D.
void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmShape& shape = {});

namespace cpu {
// Row-major fp32 GEMM over raw pointers; parallel over the thread pool, each thread owning a
// fixed block of c, so results are deterministic for a fixed thread count. Must not be called
// from inside a parallel_for body (use gemm_serial there).
void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc);
// The same on the calling thread only: for kernels that parallelise at a coarser level.
void gemm_serial(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
// Which kernels the two above run: "alloy-avx512" (core/ops/cpu/packed_gemm.h, in a build for
// a CPU with AVX-512) or "openblas" (its kernels then named by cpu::blas_core()).
const char* gemm_kernels();
}  // namespace cpu

}  // namespace alloy
