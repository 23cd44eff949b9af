#include "core/ops/cpu/blas_core.h"

#include <cblas.h>

namespace alloy::cpu {

std::string blas_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

std::optional<std::string> better_blas_core() {
#if defined(__x86_64__)
  if (blas_core() != "Prescott") return std::nullopt;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return std::nullopt;
}

}  // namespace alloy::cpu
