// Alloy's own fp32 GEMM for CPUs with AVX-512, behind cpu::gemm_serial where the build has it.
// Why not OpenBLAS's: OpenBLAS picks its kernels when it loads, and an environment pin
// (OPENBLAS_CORETYPE=Haswell, set on some machines because older builds misdetect the CPU)
// holds it to AVX2 kernels at half this speed; this one is compiled for the machine
// (-march=native). Each element of c sums its products in one fixed order (depth blocks in
// order, products in order within a block), so its bits do not depend on how a caller splits c.
// Each calling thread keeps its packing buffers between calls: up to 2.1 MiB, or n x k floats
// for a weight gradient with n < 32 (its b, copied to aligned rows).
#pragma once

#include <cstdint>

namespace alloy::cpu {

// Whether this build has the kernel (compiled with AVX-512F).
bool packed_gemm_available();

// Row-major c = alpha * op(a) * op(b) + beta * c on the calling thread, as cblas_sgemm; beta == 0
// ignores c's old contents, NaN included. m, n >= 1 and k >= 1. With packed_a (pack_whole_a's
// panels of this a), a is not packed again: the same bits, for the cost of the product alone.
// Fails where not available.
void packed_gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc,
                 const float* packed_a = nullptr);

// op(a) (m x k) in the kernel's panels, packed_a_floats(m, k) floats at `out`: packed once for
// the many products of a layer's weights with each group of images, where packing 512 x 2304
// weights for each product of 64 columns cost a third of the product.
std::int64_t packed_a_floats(int m, int k);
void pack_whole_a(bool transpose_a, int m, int k, const float* a, int lda, float* out);

}  // namespace alloy::cpu
