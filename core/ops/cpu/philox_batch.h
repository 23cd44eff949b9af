// Philox4x32-10 (core/philox.h) over a run of consecutive counters, for CPU kernels that draw
// many words at once (dropout). The same bits as philox4x32_10, computed several counters per
// instruction where the CPU has AVX-512 or AVX2.
#pragma once

#include <cstdint>

#include "core/philox.h"

namespace alloy::cpu {

// The ways philox4x32_10_run can compute: one counter at a time, or 4 (AVX2) or 8 (AVX-512)
// counters per vector instruction.
enum class PhiloxIsa { scalar, avx2, avx512 };

// Whether this CPU (and build) can run `isa`; scalar always.
bool philox_isa_supported(PhiloxIsa isa);
// The fastest supported one, the default below.
PhiloxIsa philox_best_isa();

// words[4 * i + w] = word w of philox4x32_10({{first + i, c1, c2, c3}}, k0, k1) for i in
// [0, count) (first + i wraps modulo 2^32, as a u32 counter word does). Every isa gives the
// same words; Error if this CPU lacks `isa`.
void philox4x32_10_run(std::uint32_t first, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                       std::uint32_t k0, std::uint32_t k1, std::int64_t count, std::uint32_t* words,
                       PhiloxIsa isa = philox_best_isa());

}  // namespace alloy::cpu
