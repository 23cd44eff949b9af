#include "core/ops/cpu/convert.h"

#include "core/half.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define ALLOY_X86_VECTOR 1
#endif

namespace alloy::cpu {

namespace {

void widen_scalar(const std::uint16_t* in, DType dtype, float* out, std::int64_t count) {
  if (dtype == DType::f16) {
    for (std::int64_t i = 0; i < count; ++i)
      out[i] = half_bits_to_float(in[i]);
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      out[i] = bf16_bits_to_float(in[i]);
  }
}

void narrow_scalar(const float* in, std::uint16_t* out, DType dtype, std::int64_t count) {
  if (dtype == DType::f16) {
    for (std::int64_t i = 0; i < count; ++i)
      out[i] = float_to_half_bits(in[i]);
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      out[i] = float_to_bf16_bits(in[i]);
  }
}

#ifdef ALLOY_X86_VECTOR

constexpr std::uint16_t kCanonicalHalfNan = 0x7fff;

__attribute__((target("avx2,f16c"))) void widen_avx2(const std::uint16_t* in, DType dtype,
                                                     float* out, std::int64_t count) {
  const __m256 canonical_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  std::int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    __m256 values;
    if (dtype == DType::f16) {
      // The hardware keeps NaN payloads; half.h maps every f16 NaN to one pattern.
      values = _mm256_cvtph_ps(bits);
      values = _mm256_blendv_ps(values, canonical_nan, _mm256_cmp_ps(values, values, _CMP_UNORD_Q));
    } else {
      values = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
    }
    _mm256_storeu_ps(out + i, values);
  }
  widen_scalar(in + i, dtype, out + i, count - i);
}

__attribute__((target("avx2,f16c"))) void narrow_avx2(const float* in, std::uint16_t* out,
                                                      DType dtype, std::int64_t count) {
  std::int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 values = _mm256_loadu_ps(in + i);
    __m128i bits;
    if (dtype == DType::f16) {
      bits = _mm256_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    } else {
      // Round to nearest even on the raw bits: add 0x7fff plus the lowest kept bit.
      const __m256i raw = _mm256_castps_si256(values);
      const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(raw, 16), _mm256_set1_epi32(1));
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(raw, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
      // packus works within 128-bit lanes; the permute puts the four quads back in order.
      const __m256i packed =
          _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0b11011000);
      bits = _mm256_castsi256_si128(packed);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), bits);
    const int nan_lanes = _mm256_movemask_ps(_mm256_cmp_ps(values, values, _CMP_UNORD_Q));
    if (nan_lanes != 0) {
      for (int lane = 0; lane < 8; ++lane) {
        if (nan_lanes & (1 << lane)) out[i + lane] = kCanonicalHalfNan;
      }
    }
  }
  narrow_scalar(in + i, out + i, dtype, count - i);
}

// F16C comes from cpuid directly: clang's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool cpu_has_avx2_f16c() {
  static const bool supported = __builtin_cpu_supports("avx2") && cpu_has_f16c();
  return supported;
}

#endif

}  // namespace

bool vector_conversions() {
#ifdef ALLOY_X86_VECTOR
  return cpu_has_avx2_f16c();
#else
  return false;
#endif
}

void widen_16(const std::uint16_t* in, DType dtype, float* out, std::int64_t count) {
#ifdef ALLOY_X86_VECTOR
  if (cpu_has_avx2_f16c()) return widen_avx2(in, dtype, out, count);
#endif
  widen_scalar(in, dtype, out, count);
}

void narrow_16(const float* in, std::uint16_t* out, DType dtype, std::int64_t count) {
#ifdef ALLOY_X86_VECTOR
  if (cpu_has_avx2_f16c()) return narrow_avx2(in, out, dtype, count);
#endif
  narrow_scalar(in, out, dtype, count);
}

}  // namespace alloy::cpu
