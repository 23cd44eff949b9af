#include "core/ops/cpu/philox_batch.h"

#include <cstring>

#include "core/error.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 shift and multiply intrinsics pass _mm512_undefined_epi32() as the unused
// merge source, which -W(maybe-)uninitialized reports wherever they are inlined (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace alloy::cpu {

namespace {

void scalar_run(std::uint32_t first, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                std::uint32_t k0, std::uint32_t k1, std::int64_t count, std::uint32_t* words) {
  for (std::int64_t i = 0; i < count; ++i) {
    const Philox4x32 out =
        philox4x32_10({{first + static_cast<std::uint32_t>(i), c1, c2, c3}}, k0, k1);
    std::memcpy(words + 4 * i, out.v, sizeof out.v);
  }
}

#if defined(__x86_64__)
// Structure of arrays: each counter word lives in the low half of a 64-bit lane, so that
// vpmuludq (the only 32x32 -> 64-bit vector product) gives both halves of a round's product at
// once: the low half is the next c1 or c3 as it stands (the high half of a lane is never read by
// vpmuludq, so what a xor leaves there does not matter), the high half one shift away. Chains
// of independent vectors hide the product's latency. The words are packed back into counter
// order at the end. The steps carry target attributes so that ALLOY_NATIVE=OFF builds have them
// too; the choice is made at run time there.

// Counters per vector, vectors (chains) per call of the wide step.
constexpr int kLanes512 = 8, kChains512 = 4;
constexpr int kLanes256 = 4, kChains256 = 4;

template <int chains>
[[gnu::target("avx512f")]] void avx512_step(std::uint32_t first, std::uint32_t c1, std::uint32_t c2,
                                            std::uint32_t c3, std::uint32_t k0, std::uint32_t k1,
                                            std::uint32_t* words) {
  const __m512i lanes = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  __m512i x0[chains], x1[chains], x2[chains], x3[chains];
  for (int v = 0; v < chains; ++v) {
    x0[v] = _mm512_add_epi64(_mm512_set1_epi64(first + kLanes512 * v), lanes);
    x1[v] = _mm512_set1_epi64(c1);
    x2[v] = _mm512_set1_epi64(c2);
    x3[v] = _mm512_set1_epi64(c3);
  }
  const __m512i m0 = _mm512_set1_epi64(kPhiloxM0), m1 = _mm512_set1_epi64(kPhiloxM1);
  for (int round = 0; round < 10; ++round) {
    const __m512i key0 = _mm512_set1_epi64(k0 + round * kPhiloxW0);
    const __m512i key1 = _mm512_set1_epi64(k1 + round * kPhiloxW1);
    for (int v = 0; v < chains; ++v) {
      const __m512i p0 = _mm512_mul_epu32(x0[v], m0);
      const __m512i p1 = _mm512_mul_epu32(x2[v], m1);
      // 0x96: a ^ b ^ c.
      x0[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), x1[v], key0, 0x96);
      x2[v] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), x3[v], key1, 0x96);
      x1[v] = p1;
      x3[v] = p0;
    }
  }
  // a: (word 0, word 1) of each counter, b: (word 2, word 3); interleaved a0 b0 a1 b1 ...
  const __m512i low_half = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
  const __m512i high_half = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
  for (int v = 0; v < chains; ++v) {
    const __m512i a = _mm512_mask_blend_epi32(0xAAAA, x0[v], _mm512_slli_epi64(x1[v], 32));
    const __m512i b = _mm512_mask_blend_epi32(0xAAAA, x2[v], _mm512_slli_epi64(x3[v], 32));
    std::uint32_t* out = words + 4 * kLanes512 * v;
    _mm512_storeu_si512(out, _mm512_permutex2var_epi64(a, low_half, b));
    _mm512_storeu_si512(out + 2 * kLanes512, _mm512_permutex2var_epi64(a, high_half, b));
  }
}

template <int chains>
[[gnu::target("avx2")]] void avx2_step(std::uint32_t first, std::uint32_t c1, std::uint32_t c2,
                                       std::uint32_t c3, std::uint32_t k0, std::uint32_t k1,
                                       std::uint32_t* words) {
  const __m256i lanes = _mm256_set_epi64x(3, 2, 1, 0);
  __m256i x0[chains], x1[chains], x2[chains], x3[chains];
  for (int v = 0; v < chains; ++v) {
    x0[v] = _mm256_add_epi64(_mm256_set1_epi64x(first + kLanes256 * v), lanes);
    x1[v] = _mm256_set1_epi64x(c1);
    x2[v] = _mm256_set1_epi64x(c2);
    x3[v] = _mm256_set1_epi64x(c3);
  }
  const __m256i m0 = _mm256_set1_epi64x(kPhiloxM0), m1 = _mm256_set1_epi64x(kPhiloxM1);
  for (int round = 0; round < 10; ++round) {
    const __m256i key0 = _mm256_set1_epi64x(k0 + round * kPhiloxW0);
    const __m256i key1 = _mm256_set1_epi64x(k1 + round * kPhiloxW1);
    for (int v = 0; v < chains; ++v) {
      const __m256i p0 = _mm256_mul_epu32(x0[v], m0);
      const __m256i p1 = _mm256_mul_epu32(x2[v], m1);
      x0[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), x1[v]), key0);
      x2[v] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), x3[v]), key1);
      x1[v] = p1;
      x3[v] = p0;
    }
  }
  for (int v = 0; v < chains; ++v) {
    const __m256i a = _mm256_blend_epi32(x0[v], _mm256_slli_epi64(x1[v], 32), 0xAA);
    const __m256i b = _mm256_blend_epi32(x2[v], _mm256_slli_epi64(x3[v], 32), 0xAA);
    const __m256i even = _mm256_unpacklo_epi64(a, b);  // a0 b0 | a2 b2
    const __m256i odd = _mm256_unpackhi_epi64(a, b);   // a1 b1 | a3 b3
    auto* out = reinterpret_cast<__m256i*>(words + 4 * kLanes256 * v);
    _mm256_storeu_si256(out, _mm256_permute2x128_si256(even, odd, 0x20));
    _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(even, odd, 0x31));
  }
}

using Step = void (*)(std::uint32_t first, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                      std::uint32_t k0, std::uint32_t k1, std::uint32_t* words);

// The run in wide steps of `wide_count` counters, then steps of one vector of `lanes`; the last,
// partial vector goes through scratch so that nothing past words[4 * count) is written.
template <int lanes, int wide_count, Step wide, Step single>
void vector_run(std::uint32_t first, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                std::uint32_t k0, std::uint32_t k1, std::int64_t count, std::uint32_t* words) {
  std::int64_t i = 0;
  for (; i + wide_count <= count; i += wide_count)
    wide(first + static_cast<std::uint32_t>(i), c1, c2, c3, k0, k1, words + 4 * i);
  for (; i + lanes <= count; i += lanes)
    single(first + static_cast<std::uint32_t>(i), c1, c2, c3, k0, k1, words + 4 * i);
  if (i < count) {
    std::uint32_t scratch[4 * lanes];
    single(first + static_cast<std::uint32_t>(i), c1, c2, c3, k0, k1, scratch);
    std::memcpy(words + 4 * i, scratch, sizeof(std::uint32_t) * 4 * (count - i));
  }
}

#endif

}  // namespace

// Known at compile time in -march=native builds, asked of the CPU once otherwise.
bool philox_isa_supported(PhiloxIsa isa) {
  switch (isa) {
    case PhiloxIsa::scalar:
      return true;
#if defined(__x86_64__)
    case PhiloxIsa::avx2: {
#if defined(__AVX2__)
      return true;
#else
      static const bool supported = __builtin_cpu_supports("avx2");
      return supported;
#endif
    }
    case PhiloxIsa::avx512: {
#if defined(__AVX512F__)
      return true;
#else
      static const bool supported = __builtin_cpu_supports("avx512f");
      return supported;
#endif
    }
#endif
    default:
      return false;
  }
}

PhiloxIsa philox_best_isa() {
  for (const PhiloxIsa isa : {PhiloxIsa::avx512, PhiloxIsa::avx2})
    if (philox_isa_supported(isa)) return isa;
  return PhiloxIsa::scalar;
}

void philox4x32_10_run(std::uint32_t first, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                       std::uint32_t k0, std::uint32_t k1, std::int64_t count, std::uint32_t* words,
                       PhiloxIsa isa) {
  ALLOY_CHECK(philox_isa_supported(isa), "philox4x32_10_run: this CPU has no ",
              isa == PhiloxIsa::avx512 ? "AVX-512" : "AVX2");
  switch (isa) {
#if defined(__x86_64__)
    case PhiloxIsa::avx512:
      return vector_run<kLanes512, kLanes512 * kChains512, avx512_step<kChains512>, avx512_step<1>>(
          first, c1, c2, c3, k0, k1, count, words);
    case PhiloxIsa::avx2:
      return vector_run<kLanes256, kLanes256 * kChains256, avx2_step<kChains256>, avx2_step<1>>(
          first, c1, c2, c3, k0, k1, count, words);
#endif
    default:
      return scalar_run(first, c1, c2, c3, k0, k1, count, words);
  }
}

}  // namespace alloy::cpu
