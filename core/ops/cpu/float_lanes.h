// Floats in vector lanes for the CPU kernels that say their vectorisation explicitly (the
// Winograd transforms: rows too short, or loops too branchy, for the compiler's vectoriser),
// with GCC's vector extension: one register where the machine has one that wide, several
// narrower ones otherwise. (Concrete types: GCC drops vector_size from a dependent alias.)
#pragma once

#include <cstring>

namespace alloy::cpu {

using FloatLanes8 = float __attribute__((vector_size(8 * sizeof(float))));
using FloatLanes16 = float __attribute__((vector_size(16 * sizeof(float))));

// A vector of lanes from p and back, unaligned.
template <class Lanes>
Lanes load_lanes(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class Lanes>
void store_lanes(float* p, Lanes v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace alloy::cpu
