#include "core/ops/cpu/lane_transpose.h"

#include <algorithm>

#include "core/ops/cpu/convert.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace alloy::cpu {

namespace {

using Index = std::int64_t;

// The lane vectors of consecutive elements under a LaneRows layout, walked without a division.
class VectorWalk {
 public:
  explicit VectorWalk(LaneRows layout) : layout_(layout) {}
  // The current element's vector, in floats from the lanes' start.
  Index offset() const { return (row_ * layout_.stride + column_) * kLaneCount; }
  void next() {
    if (++column_ == layout_.width) {
      column_ = 0;
      ++row_;
    }
  }

 private:
  LaneRows layout_;
  Index row_ = 0, column_ = 0;
};

// Row n's elements [first, first + width) (width <= 16) as floats in `out`, zero past width.
void widen_piece(const void* data, DType dtype, Index at, Index width, float* out) {
  std::fill(out, out + kLaneCount, 0.0f);
  if (dtype == DType::f32) {
    std::copy_n(static_cast<const float*>(data) + at, width, out);
  } else {
    widen_16(static_cast<const std::uint16_t*>(data) + at, dtype, out, width);
  }
}

// Writes `width` floats of `values` to elements [at, at + width) of `data`, rounded to dtype.
void narrow_piece(const float* values, Index width, void* data, DType dtype, Index at) {
  if (dtype == DType::f32) {
    std::copy_n(values, width, static_cast<float*>(data) + at);
  } else {
    narrow_16(values, static_cast<std::uint16_t*>(data) + at, dtype, width);
  }
}

#if defined(__AVX512F__)

// GCC 12's AVX-512 headers give the unpack and shuffle intrinsics an undefined vector that they
// initialise from itself, which -Wuninitialized reports at every inlined call.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

// r[0..15] rows in, r[0..15] columns out: column c = element c of every row, in row order.
// Pairs of rows interleave by 32 bits, then 64, then the 128-bit quarters move twice.
void transpose_16x16(__m512 (&r)[16]) {
  __m512 a[16], b[16];
  for (int k = 0; k < 16; k += 2) {
    a[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
    a[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
  }
  // b[4k + q], quarter j: column 4j + q of rows 4k .. 4k + 3.
  for (int k = 0; k < 16; k += 4) {
    const __m512d a0 = _mm512_castps_pd(a[k]), a1 = _mm512_castps_pd(a[k + 1]);
    const __m512d a2 = _mm512_castps_pd(a[k + 2]), a3 = _mm512_castps_pd(a[k + 3]);
    b[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    b[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    b[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    b[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
  for (int q = 0; q < 4; ++q) {
    const __m512 even01 = _mm512_shuffle_f32x4(b[q], b[4 + q], 0x88);  // quarters 0, 2
    const __m512 odd01 = _mm512_shuffle_f32x4(b[q], b[4 + q], 0xDD);   // quarters 1, 3
    const __m512 even23 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], 0x88);
    const __m512 odd23 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], 0xDD);
    r[q] = _mm512_shuffle_f32x4(even01, even23, 0x88);      // column q
    r[4 + q] = _mm512_shuffle_f32x4(odd01, odd23, 0x88);    // column 4 + q
    r[8 + q] = _mm512_shuffle_f32x4(even01, even23, 0xDD);  // column 8 + q
    r[12 + q] = _mm512_shuffle_f32x4(odd01, odd23, 0xDD);   // column 12 + q
  }
}

#pragma GCC diagnostic pop

#endif

}  // namespace

void rows_to_lanes(const void* data, DType dtype, const std::int64_t (&offsets)[kLaneCount],
                   int count, std::int64_t length, float* lanes, LaneRows layout) {
  VectorWalk walk(layout);
#if defined(__AVX512F__)
  for (Index first = 0; first < length; first += kLaneCount) {
    const Index width = std::min<Index>(kLaneCount, length - first);
    const __mmask16 mask = static_cast<__mmask16>((1u << width) - 1u);
    __m512 r[kLaneCount];
    for (int n = 0; n < kLaneCount; ++n) {
      if (n >= count) {
        r[n] = _mm512_setzero_ps();
      } else if (dtype == DType::f32) {
        r[n] = _mm512_maskz_loadu_ps(mask, static_cast<const float*>(data) + offsets[n] + first);
      } else {
        alignas(64) float piece[kLaneCount];
        widen_piece(data, dtype, offsets[n] + first, width, piece);
        r[n] = _mm512_load_ps(piece);
      }
    }
    transpose_16x16(r);
    for (Index i = 0; i < width; ++i, walk.next())
      _mm512_storeu_ps(lanes + walk.offset(), r[i]);
  }
#else
  for (Index first = 0; first < length; first += kLaneCount) {
    const Index width = std::min<Index>(kLaneCount, length - first);
    float pieces[kLaneCount][kLaneCount] = {};
    for (int n = 0; n < count; ++n)
      widen_piece(data, dtype, offsets[n] + first, width, pieces[n]);
    for (Index i = 0; i < width; ++i, walk.next()) {
      float* vector = lanes + walk.offset();
      for (int n = 0; n < kLaneCount; ++n)
        vector[n] = pieces[n][i];
    }
  }
#endif
}

void lanes_to_rows(const float* lanes, LaneRows layout, int count, std::int64_t length, void* data,
                   DType dtype, const std::int64_t (&offsets)[kLaneCount]) {
  VectorWalk walk(layout);
#if defined(__AVX512F__)
  for (Index first = 0; first < length; first += kLaneCount) {
    const Index width = std::min<Index>(kLaneCount, length - first);
    __m512 r[kLaneCount];
    for (Index i = 0; i < kLaneCount; ++i)
      r[i] = _mm512_setzero_ps();
    for (Index i = 0; i < width; ++i, walk.next())
      r[i] = _mm512_loadu_ps(lanes + walk.offset());
    transpose_16x16(r);
    for (int n = 0; n < count; ++n) {
      if (dtype == DType::f32 && width == kLaneCount) {
        _mm512_storeu_ps(static_cast<float*>(data) + offsets[n] + first, r[n]);
      } else {
        // A partial row through a copy: masked stores are microcoded on AMD.
        alignas(64) float piece[kLaneCount];
        _mm512_store_ps(piece, r[n]);
        narrow_piece(piece, width, data, dtype, offsets[n] + first);
      }
    }
  }
#else
  for (Index first = 0; first < length; first += kLaneCount) {
    const Index width = std::min<Index>(kLaneCount, length - first);
    float pieces[kLaneCount][kLaneCount];
    for (Index i = 0; i < width; ++i, walk.next()) {
      const float* vector = lanes + walk.offset();
      for (int n = 0; n < kLaneCount; ++n)
        pieces[n][i] = vector[n];
    }
    for (int n = 0; n < count; ++n)
      narrow_piece(pieces[n], width, data, dtype, offsets[n] + first);
  }
#endif
}

}  // namespace alloy::cpu
