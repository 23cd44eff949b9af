// Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC11; Random123's philox4x32_R with R = 10): a counter-based generator, a pure function of a
// 128-bit counter and a 64-bit key to 128 random bits. Nothing is carried from one draw to the
// next, so any element's random bits can be computed by whichever thread handles it, on the CPU
// or on the GPU, and come out the same (these functions are shared by both backends). The
// output matches Random123's known-answer vectors (tests/core/philox_test.cpp).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace alloy {

struct Philox4x32 {
  std::uint32_t v[4];
};

inline constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;  // the golden ratio's bits
inline constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

// One round on the counter words c0..c3 with key words k0, k1 (in place). The 32x32 -> 64-bit
// products are plain 64-bit multiplications, which nvcc turns into mul.wide / mul.hi.
ALLOY_HOST_DEVICE inline void philox_round(std::uint32_t& c0, std::uint32_t& c1, std::uint32_t& c2,
                                           std::uint32_t& c3, std::uint32_t k0, std::uint32_t k1) {
  const std::uint64_t p0 = static_cast<std::uint64_t>(kPhiloxM0) * c0;
  const std::uint64_t p1 = static_cast<std::uint64_t>(kPhiloxM1) * c2;
  const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32);
  const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32);
  const std::uint32_t next0 = hi1 ^ c1 ^ k0;
  const std::uint32_t next2 = hi0 ^ c3 ^ k1;
  c1 = static_cast<std::uint32_t>(p1);
  c3 = static_cast<std::uint32_t>(p0);
  c0 = next0;
  c2 = next2;
}

// The 10 rounds, the key bumped by the Weyl constants between rounds.
ALLOY_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 counter, std::uint32_t k0,
                                                  std::uint32_t k1) {
  std::uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    philox_round(c0, c1, c2, c3, k0, k1);
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

}  // namespace alloy
