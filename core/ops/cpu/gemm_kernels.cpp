#include "core/ops/cpu/gemm_kernels.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include "core/error.h"

namespace alloy::cpu {

namespace {

// OpenBLAS 0.3.21's x86-64 cores (openblas_get_corename's spelling) with AVX-512 kernels, and
// those without AVX2 ones: what it loads for CPUs it does not know.
constexpr std::array<std::string_view, 3> kAvx512Cores = {"SkylakeX", "Cooperlake",
                                                          "SapphireRapids"};
constexpr std::array<std::string_view, 8> kPreAvx2Cores = {
    "Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Barcelona", "Sandybridge"};

template <std::size_t N>
bool one_of(const std::array<std::string_view, N>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string openblas_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

std::string onednn_kernels() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "oneDNN sse41";
    case dnnl_cpu_isa_avx:
      return "oneDNN avx";
    case dnnl_cpu_isa_avx2:
      return "oneDNN avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "oneDNN avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "oneDNN avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "oneDNN avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "oneDNN avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "oneDNN avx512_core_amx";
    default: {
      std::ostringstream name;  // an instruction set newer than this list
      name << "oneDNN isa 0x" << std::hex << static_cast<unsigned>(dnnl_get_effective_cpu_isa());
      return name.str();
    }
  }
}

GemmLibrary library_from_environment() {
  const char* forced = std::getenv("ALLOY_CPU_GEMM");
  if (forced == nullptr || *forced == '\0') {
    return choose_gemm_library(openblas_core(), cpu_vector_features());
  }
  const std::string_view name = forced;
  if (name == "openblas") return GemmLibrary::openblas;
  if (name == "onednn") return GemmLibrary::onednn;
  usage_fail("ALLOY_CPU_GEMM is '", name, "': expected openblas or onednn");
}

}  // namespace

CpuVectorFeatures cpu_vector_features() {
  CpuVectorFeatures features;
#if defined(__x86_64__)
  features.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  features.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
  return features;
}

GemmLibrary choose_gemm_library(const std::string& openblas_core,
                                const CpuVectorFeatures& features) {
  if (features.avx512) {
    return one_of(kAvx512Cores, openblas_core) ? GemmLibrary::openblas : GemmLibrary::onednn;
  }
  if (features.avx2_fma && one_of(kPreAvx2Cores, openblas_core)) return GemmLibrary::onednn;
  return GemmLibrary::openblas;
}

GemmLibrary gemm_library() {
  static const GemmLibrary chosen = library_from_environment();
  return chosen;
}

std::string gemm_kernels() {
  return gemm_library() == GemmLibrary::openblas ? "OpenBLAS " + openblas_core() : onednn_kernels();
}

void library_sgemm(GemmLibrary library, bool transpose_a, bool transpose_b, int m, int n, int k,
                   float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                   float* c, int ldc) {
  if (library == GemmLibrary::openblas) {
    // One thread, as for oneDNN below; openblas_set_num_threads is process-wide.
    static const bool single_thread = [] {
      openblas_set_num_threads(1);
      return true;
    }();
    static_cast<void>(single_thread);
    cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
                transpose_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                ldc);
    return;
  }
  use_one_gemm_thread_here();
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  ALLOY_CHECK(status == dnnl_success, "oneDNN sgemm failed (status ", static_cast<int>(status),
              ") on m ", m, ", n ", n, ", k ", k, ", lda ", lda, ", ldb ", ldb, ", ldc ", ldc);
}

}  // namespace alloy::cpu
