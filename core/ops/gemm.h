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
// One product's arguments, in gemm's order.
struct GemmCall {
  bool transpose_a, transpose_b;
  int m, n, k;
  float alpha;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float beta;
  float* c;
  int ldc;
};
void gemm(const GemmCall& call);
// Two independent products at once, each on its share of the pool (by flops) and split there
// as gemm splits it: no fork/join between them, and at two threads each runs whole on its own
// core, packing its operands once instead of once per thread. Deterministic for a fixed thread
// count, as gemm is; the bits may differ from gemm's, as OpenBLAS's differ with the split.
void gemm_pair(const GemmCall& first, const GemmCall& second);
// The same on the calling thread only: for kernels that parallelise at a coarser level.
void gemm_serial(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
// op(a) prepared once for many gemm_serial calls that share it (a layer's weights against each
// group of images): packed into the AVX-512 kernel's panels, in a workspace tensor, where the build
// has that kernel; kept as a pointer otherwise. The products are those of the unprepared calls,
// bit for bit. `a` must outlive it unchanged.
class GemmLeft {
 public:
  GemmLeft(bool transpose, int m, int k, const float* a, int lda);

  bool transpose() const { return transpose_; }
  int m() const { return m_; }
  int k() const { return k_; }
  const float* a() const { return a_; }
  int lda() const { return lda_; }
  // The packed panels, or null where the build packs nothing.
  const float* packed() const;

 private:
  bool transpose_;
  int m_, k_;
  const float* a_;
  int lda_;
  Tensor packed_;
};

// gemm_serial with a prepared op(a): c = alpha * op(a) * op(b) + beta * c, op(b) k x n.
void gemm_serial(const GemmLeft& a, bool transpose_b, int n, float alpha, const float* b, int ldb,
                 float beta, float* c, int ldc);

// Which kernels the functions above run: "alloy-avx512" (core/ops/cpu/packed_gemm.h, in a build for
// a CPU with AVX-512) or "openblas" (its kernels then named by cpu::blas_core()).
const char* gemm_kernels();
}  // namespace cpu

}  // namespace alloy
