// Alloy's own fp32 GEMM for CPUs with AVX-512, behind cpu::gemm_serial where the build has it.
// Why not OpenBLAS's: OpenBLAS picks its kernels when it loads, and an environment pin
// (OPENBLAS_CORETYPE=Haswell, set on some machines because older builds misdetect the CPU)
// holds it to AVX2 kernels at half this speed; this one is compiled for the machine
// (-march=native). Each element of c sums its products in one fixed order (depth blocks in
// order, products in order within a block), so its bits do not depend on how a caller splits c.
// Each calling thread keeps its packing buffers between calls: up to 2.1 MiB, or n x k floats
// for a weight gradient with n < 32 (its b, copied to aligned rows).
#pragma once

namespace alloy::cpu {

// Whether this build has the kernel (compiled with AVX-512F).
bool packed_gemm_available();

// Row-major c = alpha * op(a) * op(b) + beta * c on the calling thread, as cblas_sgemm; beta == 0
// ignores c's old contents, NaN included. m, n >= 1 and k >= 1. Fails where not available.
void packed_gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);

}  // namespace alloy::cpu
