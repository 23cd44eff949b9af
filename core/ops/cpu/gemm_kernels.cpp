#include "core/ops/cpu/gemm_kernels.h"

#include <oneapi/dnnl/dnnl.h>

#include <sstream>

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
    default: {
      std::ostringstream name;  // an instruction set newer than this list
      name << "oneDNN isa 0x" << std::hex << static_cast<unsigned>(dnnl_get_effective_cpu_isa());
      return name.str();
    }
  }
}

}  // namespace alloy::cpu
