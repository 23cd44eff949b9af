// The project's random number generator: xoshiro256** seeded through splitmix64. Its whole
// state is four words, so checkpoints save and restore it exactly, and its output is the same
// on every platform (unlike std::normal_distribution).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace alloy {

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) { reseed(seed); }

  void reseed(std::uint64_t seed) {
    for (auto& word : state_) {
      seed += 0x9e3779b97f4a7c15ull;
      std::uint64_t mixed = seed;
      mixed = (mixed ^ (mixed >> 30)) * 0xbf58476d1ce4e5b9ull;
      mixed = (mixed ^ (mixed >> 27)) * 0x94d049bb133111ebull;
      word = mixed ^ (mixed >> 31);
    }
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const std::uint64_t shifted = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= shifted;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  // Uniform integer in [0, bound), without modulo bias.
  std::uint64_t below(std::uint64_t bound) {
    const std::uint64_t limit = -bound % bound;  // 2^64 mod bound
    for (;;) {
      const std::uint64_t draw = next_u64();
      if (draw >= limit) return draw % bound;
    }
  }

  // Standard normal by Box-Muller; uses two draws per value so the state stays simple.
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  const std::array<std::uint64_t, 4>& state() const { return state_; }
  void set_state(const std::array<std::uint64_t, 4>& state) { state_ = state; }

 private:
  static std::uint64_t rotl(std::uint64_t value, int shift) {
    return (value << shift) | (value >> (64 - shift));
  }

  std::array<std::uint64_t, 4> state_{};
};

}  // namespace alloy
