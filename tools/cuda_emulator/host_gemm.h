// The matrix products behind the emulated cuBLAS, cuBLASLt and cuDNN: inputs widened (and
// rounded as the compute type allows) into fp32, multiplied by OpenBLAS's sgemm on one thread,
// so every call is deterministic. Half accumulation (CUBLAS_COMPUTE_16F) has no BLAS and stays
// a naive loop.
#pragma once

#include <library_types.h>

#include <cstdint>
#include <vector>

#include "tools/cuda_emulator/host_math.h"

namespace alloy::emulator {

// One GEMM input as the call describes it: column-major with leading dimension `ld`, and
// whether the call applies op = transpose to it.
struct GemmOperand {
  const void* data;
  cudaDataType_t type;
  std::int64_t ld;
  bool transposed;
};

// How the products are summed: in fp32 over k in `k_splits` consecutive ranges whose partial
// sums are then added in order (a split-k algorithm), or in half precision (CUBLAS_COMPUTE_16F).
struct Accumulation {
  InputRounding rounding = InputRounding::none;
  int k_splits = 1;
  bool half = false;
};

// op(A) op(B) for op(A) m x k and op(B) k x n, as a column-major m x n fp32 array.
std::vector<float> gemm_products(const GemmOperand& a, const GemmOperand& b, std::int64_t m,
                                 std::int64_t n, std::int64_t k, const Accumulation& how);

// Row-major fp32 C (m x n) = op(A) op(B) + beta C, with op(A) m x k and op(B) k x n; beta 0
// does not read C.
void sgemm_rows(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                float* c, std::int64_t ldc);

}  // namespace alloy::emulator
