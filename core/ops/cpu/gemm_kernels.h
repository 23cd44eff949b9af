// The CPU's GEMM kernels, from one of two libraries, chosen once per process:
// - OpenBLAS, when it runs the widest kernels the CPU allows (AVX-512 ones on an AVX-512 CPU,
//   AVX2 ones on an AVX2 CPU). It picks them by CPU model, so a model newer than the library
//   gets older ones (Debian 12's 0.3.21 gives Sapphire and Emerald Rapids its SSE3 kernels), and
//   an environment may pin them (OPENBLAS_CORETYPE=Haswell on our Zen 5 VM).
// - oneDNN's sgemm otherwise: it generates its kernels for the instruction set the CPU reports.
// Measured on a Zen 5 core (docs/PERFORMANCE.md): oneDNN 250-270 GFLOP/s where the pinned AVX2
// OpenBLAS ran 80-135; OpenBLAS's own AVX-512 kernels 184 against oneDNN's 97 on LeNet's
// weight-gradient shape (50 x 20, k 400), and within 20% of oneDNN on the rest.
#pragma once

#include <string>

// The OpenMP runtime's C interface, which oneDNN's threads come from (GNU OpenMP, linked with
// oneDNN by cmake/AlloyLibraries.cmake). Declared here rather than through <omp.h>, which only an
// OpenMP-enabled compile of the same compiler provides.
extern "C" void omp_set_num_threads(int threads);

namespace alloy::cpu {

enum class GemmLibrary { openblas, onednn };

// The vector extensions of this CPU that the libraries' kernels are written for.
struct CpuVectorFeatures {
  bool avx2_fma = false;  // AVX2 and FMA
  bool avx512 = false;    // AVX-512 F, BW, VL and DQ
};
CpuVectorFeatures cpu_vector_features();

// OpenBLAS when `openblas_core` (its kernels' name: "Haswell", "SkylakeX", ...) is the widest
// the features allow; oneDNN otherwise.
GemmLibrary choose_gemm_library(const std::string& openblas_core,
                                const CpuVectorFeatures& features);

// This process's choice: ALLOY_CPU_GEMM=openblas or onednn in the environment forces it (to
// compare them); otherwise choose_gemm_library over the loaded OpenBLAS and this CPU.
GemmLibrary gemm_library();

// The kernels' name for the JSON start event's blas_core: "OpenBLAS Cooperlake", "oneDNN
// avx512_core", ... CPU results are bit-identical across machines with the same name.
std::string gemm_kernels();

// c = alpha op(a) op(b) + beta c, row-major, k > 0, on the calling thread, in `library`.
void library_sgemm(GemmLibrary library, bool transpose_a, bool transpose_b, int m, int n, int k,
                   float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                   float* c, int ldc);

// oneDNN's GEMMs run on OpenMP threads, as many as the calling thread's OpenMP setting allows.
// Alloy's kernels split their work over its own pool, so each thread that calls a GEMM asks for
// one: no threads competing with the pool's for its cores, and a fixed order of every sum.
// Inline, for the CUDA emulator's GEMMs too (tools/cuda_emulator/host_gemm.cpp).
inline void use_one_gemm_thread_here() {
  thread_local const bool once = [] {
    omp_set_num_threads(1);
    return true;
  }();
  static_cast<void>(once);
}

}  // namespace alloy::cpu
