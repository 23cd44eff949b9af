// The CPU's GEMM kernels: oneDNN's sgemm, which generates its kernels for the instruction set
// the CPU has (AVX-512, AVX2, ...) when it first runs. It replaced OpenBLAS, which picks kernels
// by CPU model and gives models newer than the library older kernels: on a Zen 5 core Debian
// 12's OpenBLAS ran its AVX2 kernels at 125-135 GFLOP/s, oneDNN 250-270 (docs/PERFORMANCE.md).
#pragma once

#include <string>

// The OpenMP runtime's C interface, which oneDNN's threads come from (GNU OpenMP, linked with
// oneDNN by cmake/AlloyLibraries.cmake). Declared here rather than through <omp.h>, which only an
// OpenMP-enabled compile of the same compiler provides.
extern "C" void omp_set_num_threads(int threads);

namespace alloy::cpu {

// The kernels' instruction set as oneDNN names it ("oneDNN avx512_core", "oneDNN avx2", ...):
// CPU results are bit-identical across machines whose GEMMs run the same kernels.
std::string gemm_kernels();

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
