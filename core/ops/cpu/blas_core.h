// OpenBLAS chooses its kernels by CPU model when the library loads. A model newer than the
// library (Debian 12's OpenBLAS 0.3.21 knows neither Sapphire nor Emerald Rapids) gets its SSE3
// "Prescott" kernels: LeNet trains 1.7x slower on such a Xeon than with its AVX-512 kernels.
// `alloy` restarts itself once with OPENBLAS_CORETYPE naming what the CPU's features allow.
#pragma once

#include <optional>
#include <string>

namespace alloy::cpu {

// The kernels OpenBLAS loaded: "Prescott", "Haswell", "SkylakeX", ...
std::string blas_core();

// When OpenBLAS fell back to Prescott on a CPU with AVX2 and FMA (or AVX-512), the core type
// to ask for instead; otherwise nothing.
std::optional<std::string> better_blas_core();

}  // namespace alloy::cpu
