#include "core/ops/cpu/gemm_kernels.h"

#include <oneapi/dnnl/dnnl.h>

namespace alloy::cpu {

std::string gemm_kernels() {
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
    default:
      return "oneDNN (other)";
  }
}

}  // namespace alloy::cpu
