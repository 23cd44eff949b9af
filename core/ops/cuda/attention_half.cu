#include "core/ops/cuda/attention_half.h"

#include <type_traits>

#include "core/ops/cuda/attention_common.cuh"
#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kBlockThreads = 32 * kWarps;
constexpr int kTile = 16;                   // a wmma tile's side: a warp's query rows or keys
constexpr int kBlockRows = kWarps * kTile;  // query rows (or keys) of a block
constexpr int kStep = 32;                   // query rows or keys of a backward step: a lane each
constexpr int kPad = 8;  // halves after each shared row, so that rows start in other banks

template <class T>
using MatrixA = wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, T, wmma::row_major>;
template <class T>
using ColumnsB = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, T, wmma::col_major>;
template <class T>
using RowsB = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, T, wmma::row_major>;
using Accumulator = wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float>;

// The head size padded to a multiple of the tile: 32, 64 or 128.
template <int Dp>
using Width = std::integral_constant<int, Dp>;

// Keys per forward step: as many as shared memory holds beside the scores.
template <int Dp>
constexpr int kForwardKeys = Dp == 128 ? 32 : 64;

// Shared rows of a head, Dp halves each (zero past D). Fragment pointers stay 32-byte aligned:
// a tile starts every 16 rows (16 (Dp + kPad) halves) and every 16 columns.
template <class T, int Rows, int Dp>
struct alignas(32) RowTile {
  T at[Rows][Dp + kPad];
};

template <class T, int Dp>
using Rows = T (*)[Dp + kPad];

// `rows` rows from `first` of part `part` (0 q, 1 k, 2 v, -1 the [B, T, C] tensor) into `tile`,
// zero past T and D: every thread of the block.
template <class T, int Dp>
__device__ void load_rows(Rows<T, Dp> tile, int rows, const T* data, const HeadView& v,
                          std::int64_t first, int part) {
  for (int e = threadIdx.x; e < rows * Dp; e += kBlockThreads) {
    const int r = e / Dp;
    const int d = e - r * Dp;
    const std::int64_t t = first + r;
    tile[r][d] = t < v.time && d < v.dim ? data[v.at(t, part) + d] : narrow<T>(0.0f);
  }
}

// Shared rows row.. row + 15 as the left operand of products over the head's columns.
template <class T, int Dp>
__device__ void load_left(MatrixA<T> (&a)[Dp / kTile], const T (*tile)[Dp + kPad], int row) {
  ALLOY_UNROLL
  for (int c = 0; c < Dp / kTile; ++c)
    wmma::load_matrix_sync(a[c], &tile[row][c * kTile], Dp + kPad);
}

// out (16 x N fp32, row stride ld) = a (16 x Dp) times the transpose of N shared rows.
template <int N, int Dp, class T>
__device__ void times_transposed(float* out, int ld, const MatrixA<T> (&a)[Dp / kTile],
                                 const T (*rows)[Dp + kPad]) {
  ALLOY_UNROLL
  for (int j = 0; j < N / kTile; ++j) {
    Accumulator sum;
    wmma::fill_fragment(sum, 0.0f);
    ALLOY_UNROLL
    for (int c = 0; c < Dp / kTile; ++c) {
      ColumnsB<T> b;
      wmma::load_matrix_sync(b, &rows[j * kTile][c * kTile], Dp + kPad);
      wmma::mma_sync(sum, a[c], b, sum);
    }
    wmma::store_matrix_sync(out + j * kTile, sum, ld, wmma::mem_row_major);
  }
}

// sums (16 x Dp) += p (16 x N halves in shared memory, row stride ld) times N shared rows.
template <int N, int Dp, class T>
__device__ void accumulate(Accumulator (&sums)[Dp / kTile], const T* p, int ld,
                           const T (*rows)[Dp + kPad]) {
  ALLOY_UNROLL
  for (int k = 0; k < N / kTile; ++k) {
    MatrixA<T> a;
    wmma::load_matrix_sync(a, p + k * kTile, ld);
    ALLOY_UNROLL
    for (int c = 0; c < Dp / kTile; ++c) {
      RowsB<T> b;
      wmma::load_matrix_sync(b, &rows[k * kTile][c * kTile], Dp + kPad);
      wmma::mma_sync(sums[c], a, b, sums[c]);
    }
  }
}

// sums * factor into rows first.. first + 15 of part `part`, through the warp's fp32 scratch
// (16 x 16 at least, row stride ld).
template <class T, int Dp>
__device__ void store_rows(T* out, const HeadView& v, std::int64_t first, int part,
                           const Accumulator (&sums)[Dp / kTile], float factor, float* scratch,
                           int ld) {
  const int lane = threadIdx.x % 32;
  ALLOY_UNROLL
  for (int c = 0; c < Dp / kTile; ++c) {
    wmma::store_matrix_sync(scratch, sums[c], ld, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < kTile * kTile; e += 32) {
      const int r = e / kTile;
      const int column = e - r * kTile;
      const int d = c * kTile + column;
      const std::int64_t t = first + r;
      if (t < v.time && d < v.dim)
        out[v.at(t, part) + d] = narrow<T>(scratch[r * ld + column] * factor);
    }
    __syncwarp();
  }
}

template <int N>
__device__ void fill_zero(Accumulator (&sums)[N]) {
  ALLOY_UNROLL
  for (int c = 0; c < N; ++c)
    wmma::fill_fragment(sums[c], 0.0f);
}

// Keys and values key0.. key0 + n - 1 into shared memory between two barriers, the first for
// the previous step's readers: every thread of the block.
template <class T, int Dp>
__device__ void load_keys_values(Rows<T, Dp> keys, Rows<T, Dp> values, int n, const T* qkv,
                                 const HeadView& view, std::int64_t key0) {
  __syncthreads();
  load_rows<T, Dp>(keys, n, qkv, view, key0, 1);
  load_rows<T, Dp>(values, n, qkv, view, key0, 2);
  __syncthreads();
}

template <class T, int Dp, int Kt>
struct ForwardShared {
  RowTile<T, 2 * Kt, Dp> kv;  // a step's keys, then its values (first the block's queries)
  alignas(32) float scores[kWarps][kTile][Kt + 4];
  alignas(32) T p[kWarps][kTile][Kt + kPad];
};

template <class T, int Dp>
__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(const T* qkv, AttentionGeometry g, float scale, T* y, float* lse,
                   AttentionDropoutBits dropout, Width<Dp>) {
  constexpr int Kt = kForwardKeys<Dp>;
  static_assert(2 * Kt >= kBlockRows, "the block's queries are staged in the key tiles");
  constexpr int ld = Kt + 4;
  constexpr int ldp = Kt + kPad;
  __shared__ ForwardShared<T, Dp, Kt> s;
  const HeadView view = head_view(g);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * kBlockRows;
  const std::int64_t warp_row0 = row0 + warp * kTile;
  const std::int64_t block_last = min(row0 + kBlockRows, g.time) - 1;
  const std::int64_t warp_last = min(warp_row0 + kTile, g.time) - 1;  // < warp_row0: no rows
  const bool drops = dropout.step != nullptr;
  const auto step = drops ? static_cast<std::uint32_t>(*dropout.step) : 0u;
  float* const scores = &s.scores[warp][0][0];
  T* const probabilities = &s.p[warp][0][0];
  Rows<T, Dp> const keys = s.kv.at;
  Rows<T, Dp> const values = s.kv.at + Kt;

  load_rows<T, Dp>(keys, kBlockRows, qkv, view, row0, 0);
  __syncthreads();
  MatrixA<T> q[Dp / kTile];
  load_left<T, Dp>(q, keys, warp * kTile);

  // Pass 1: each row's max and sum of exp (every lane holds all 16 rows').
  float m[kTile], l[kTile];
  ALLOY_UNROLL
  for (int r = 0; r < kTile; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  for (std::int64_t key0 = 0; key0 <= block_last; key0 += Kt) {
    __syncthreads();  // the previous tile's readers (and the queries' loads) are done
    load_rows<T, Dp>(keys, Kt, qkv, view, key0, 1);
    __syncthreads();
    if (key0 > warp_last) continue;  // after every row of this warp: all masked
    times_transposed<Kt, Dp>(scores, ld, q, keys);
    __syncwarp();
    ALLOY_UNROLL
    for (int r = 0; r < kTile; ++r) {
      const std::int64_t t = warp_row0 + r;
      float x[Kt / 32];
      float tile_max = -INFINITY;
      ALLOY_UNROLL
      for (int i = 0; i < Kt / 32; ++i) {
        const int c = lane + 32 * i;
        x[i] = key0 + c <= t && t < g.time ? scores[r * ld + c] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, x[i]);
      }
      const float m_new = fmaxf(m[r], warp_max(tile_max));
      if (m_new == -INFINITY) continue;  // no key yet: the same in every lane
      float sum = 0.0f;
      ALLOY_UNROLL
      for (int i = 0; i < Kt / 32; ++i)
        sum += expf(x[i] - m_new);
      l[r] = l[r] * expf(m[r] - m_new) + warp_sum(sum);
      m[r] = m_new;
    }
    __syncwarp();  // read before the next tile's scores overwrite them
  }
  float row_lse[kTile];
  ALLOY_UNROLL
  for (int r = 0; r < kTile; ++r)
    row_lse[r] = m[r] + logf(l[r]);

  // Pass 2: y = sum of p v with p = exp(s - lse), rounded to T.
  Accumulator o[Dp / kTile];
  fill_zero(o);
  for (std::int64_t key0 = 0; key0 <= block_last; key0 += Kt) {
    load_keys_values<T, Dp>(keys, values, Kt, qkv, view, key0);
    if (key0 > warp_last) continue;
    times_transposed<Kt, Dp>(scores, ld, q, keys);
    __syncwarp();
    ALLOY_UNROLL
    for (int r = 0; r < kTile; ++r) {
      const std::int64_t t = warp_row0 + r;
      ALLOY_UNROLL
      for (int i = 0; i < Kt / 32; ++i) {
        const int c = lane + 32 * i;
        const std::int64_t key = key0 + c;
        float p = 0.0f;
        if (key <= t && t < g.time) {
          p = expf(scores[r * ld + c] * scale - row_lse[r]);
          // The softmax normalises over every key; dropout scales what multiplies v.
          if (drops) p *= attention_keep_factor(dropout, step, view.b, view.h, t, key, g.time);
        }
        probabilities[r * ldp + c] = narrow<T>(p);
      }
    }
    __syncwarp();
    accumulate<Kt, Dp>(o, probabilities, ldp, values);
  }
  store_rows<T, Dp>(y, view, warp_row0, -1, o, 1.0f, scores, ld);
  if (lse != nullptr) {
    ALLOY_UNROLL
    for (int r = 0; r < kTile; ++r) {
      const std::int64_t t = warp_row0 + r;
      if (lane == r && t < g.time) lse[(view.b * g.heads + view.h) * g.time + t] = row_lse[r];
    }
  }
}

// The probability of element (t, key) and its score gradient, from its score and dy . v:
// p z (what multiplied v) and ds = p (z dy.v - delta); zero where masked.
struct ScoreGradient {
  float pz = 0.0f, ds = 0.0f;
};

__device__ __forceinline__ ScoreGradient score_gradient(float score, float dyv, float row_lse,
                                                        float row_delta, std::int64_t t,
                                                        std::int64_t key, const HeadView& view,
                                                        const AttentionGeometry& g, float scale,
                                                        const AttentionDropoutBits& dropout,
                                                        std::uint32_t step) {
  ScoreGradient out;
  if (key <= t && t < g.time) {
    const float z = dropout.step != nullptr
                        ? attention_keep_factor(dropout, step, view.b, view.h, t, key, g.time)
                        : 1.0f;
    const float p = expf(score * scale - row_lse);
    out.pz = p * z;
    out.ds = p * (z * dyv - row_delta);
  }
  return out;
}

template <class T, int Dp>
struct KeysShared {
  RowTile<T, 2 * kStep, Dp> rows;  // a step's queries, then their dy (first the keys, values)
  float lse[kStep], delta[kStep];
  alignas(32) float scores[kWarps][kTile][kStep + 4];  // keys by queries
  alignas(32) float dyv[kWarps][kTile][kStep + 4];     // v . dy, keys by queries
  alignas(32) T pz[kWarps][kTile][kStep + kPad];
  alignas(32) T ds[kWarps][kTile][kStep + kPad];
};

// dk and dv of 64 keys, a warp's 16 over the query rows from the block's first key on.
template <class T, int Dp>
__global__ void __launch_bounds__(kBlockThreads)
    dkdv_kernel(const T* qkv, const T* dy, const float* lse, const float* delta,
                AttentionGeometry g, float scale, AttentionDropoutBits dropout, T* dqkv,
                Width<Dp>) {
  static_assert(2 * kStep >= kBlockRows, "the block's keys are staged in the query tiles");
  constexpr int ld = kStep + 4;
  constexpr int ldh = kStep + kPad;
  __shared__ KeysShared<T, Dp> s;
  const HeadView view = head_view(g);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const std::int64_t key_block = static_cast<std::int64_t>(blockIdx.x) * kBlockRows;
  const std::int64_t warp_key0 = key_block + warp * kTile;
  const auto step = dropout.step != nullptr ? static_cast<std::uint32_t>(*dropout.step) : 0u;
  Rows<T, Dp> const queries = s.rows.at;
  Rows<T, Dp> const grads = s.rows.at + kStep;

  MatrixA<T> k[Dp / kTile], v[Dp / kTile];
  load_rows<T, Dp>(queries, kBlockRows, qkv, view, key_block, 1);
  __syncthreads();
  load_left<T, Dp>(k, queries, warp * kTile);
  __syncthreads();
  load_rows<T, Dp>(queries, kBlockRows, qkv, view, key_block, 2);
  __syncthreads();
  load_left<T, Dp>(v, queries, warp * kTile);

  Accumulator dk[Dp / kTile], dv[Dp / kTile];
  fill_zero(dk);
  fill_zero(dv);
  // Query rows before the block's first key see none of its keys.
  for (std::int64_t row0 = key_block; row0 < g.time; row0 += kStep) {
    __syncthreads();  // the previous step's readers are done
    load_rows<T, Dp>(queries, kStep, qkv, view, row0, 0);
    load_rows<T, Dp>(grads, kStep, dy, view, row0, -1);
    if (threadIdx.x < kStep) {
      const std::int64_t t = row0 + threadIdx.x;
      const std::int64_t at = (view.b * g.heads + view.h) * g.time + t;
      s.lse[threadIdx.x] = t < g.time ? lse[at] : 0.0f;
      s.delta[threadIdx.x] = t < g.time ? delta[at] : 0.0f;
    }
    __syncthreads();
    if (warp_key0 >= g.time || row0 + kStep <= warp_key0) continue;  // no row sees these keys
    times_transposed<kStep, Dp>(&s.scores[warp][0][0], ld, k, queries);
    times_transposed<kStep, Dp>(&s.dyv[warp][0][0], ld, v, grads);
    __syncwarp();
    const std::int64_t t = row0 + lane;
    const float row_lse = s.lse[lane], row_delta = s.delta[lane];
    ALLOY_UNROLL
    for (int j = 0; j < kTile; ++j) {
      const ScoreGradient e =
          score_gradient(s.scores[warp][j][lane], s.dyv[warp][j][lane], row_lse, row_delta, t,
                         warp_key0 + j, view, g, scale, dropout, step);
      s.pz[warp][j][lane] = narrow<T>(e.pz);
      s.ds[warp][j][lane] = narrow<T>(e.ds);
    }
    __syncwarp();
    accumulate<kStep, Dp>(dv, &s.pz[warp][0][0], ldh, grads);
    accumulate<kStep, Dp>(dk, &s.ds[warp][0][0], ldh, queries);
  }
  store_rows<T, Dp>(dqkv, view, warp_key0, 1, dk, scale, &s.scores[warp][0][0], ld);
  store_rows<T, Dp>(dqkv, view, warp_key0, 2, dv, 1.0f, &s.scores[warp][0][0], ld);
}

template <class T, int Dp>
struct QueriesShared {
  RowTile<T, 2 * kStep, Dp> kv;  // a step's keys, then its values (first queries, then dy)
  alignas(32) float scores[kWarps][kTile][kStep + 4];
  alignas(32) float dyv[kWarps][kTile][kStep + 4];
  alignas(32) T ds[kWarps][kTile][kStep + kPad];
};

// dq of 64 query rows, a warp's 16 over their keys.
template <class T, int Dp>
__global__ void __launch_bounds__(kBlockThreads)
    dq_kernel(const T* qkv, const T* dy, const float* lse, const float* delta, AttentionGeometry g,
              float scale, AttentionDropoutBits dropout, T* dqkv, Width<Dp>) {
  static_assert(2 * kStep >= kBlockRows, "the block's rows are staged in the key tiles");
  constexpr int ld = kStep + 4;
  constexpr int ldh = kStep + kPad;
  __shared__ QueriesShared<T, Dp> s;
  const HeadView view = head_view(g);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * kBlockRows;
  const std::int64_t warp_row0 = row0 + warp * kTile;
  const std::int64_t block_last = min(row0 + kBlockRows, g.time) - 1;
  const std::int64_t warp_last = min(warp_row0 + kTile, g.time) - 1;
  const auto step = dropout.step != nullptr ? static_cast<std::uint32_t>(*dropout.step) : 0u;
  Rows<T, Dp> const keys = s.kv.at;
  Rows<T, Dp> const values = s.kv.at + kStep;

  MatrixA<T> q[Dp / kTile], grad[Dp / kTile];
  load_rows<T, Dp>(keys, kBlockRows, qkv, view, row0, 0);
  __syncthreads();
  load_left<T, Dp>(q, keys, warp * kTile);
  __syncthreads();
  load_rows<T, Dp>(keys, kBlockRows, dy, view, row0, -1);
  __syncthreads();
  load_left<T, Dp>(grad, keys, warp * kTile);
  float row_lse[kTile], row_delta[kTile];
  ALLOY_UNROLL
  for (int r = 0; r < kTile; ++r) {
    const std::int64_t t = warp_row0 + r;
    const std::int64_t at = (view.b * g.heads + view.h) * g.time + t;
    row_lse[r] = t < g.time ? lse[at] : 0.0f;
    row_delta[r] = t < g.time ? delta[at] : 0.0f;
  }

  Accumulator dq[Dp / kTile];
  fill_zero(dq);
  for (std::int64_t key0 = 0; key0 <= block_last; key0 += kStep) {
    load_keys_values<T, Dp>(keys, values, kStep, qkv, view, key0);
    if (key0 > warp_last) continue;
    times_transposed<kStep, Dp>(&s.scores[warp][0][0], ld, q, keys);
    times_transposed<kStep, Dp>(&s.dyv[warp][0][0], ld, grad, values);
    __syncwarp();
    ALLOY_UNROLL
    for (int r = 0; r < kTile; ++r) {
      const ScoreGradient e =
          score_gradient(s.scores[warp][r][lane], s.dyv[warp][r][lane], row_lse[r], row_delta[r],
                         warp_row0 + r, key0 + lane, view, g, scale, dropout, step);
      s.ds[warp][r][lane] = narrow<T>(e.ds);
    }
    __syncwarp();
    accumulate<kStep, Dp>(dq, &s.ds[warp][0][0], ldh, keys);
  }
  store_rows<T, Dp>(dqkv, view, warp_row0, 0, dq, scale, &s.scores[warp][0][0], ld);
}

// body(T(), Width<Dp>()) for dtype and the head size.
template <class Body>
void dispatch_half_width(DType dtype, std::int64_t dim, const char* op, Body&& body) {
  const auto with_width = [&](auto type) {
    if (dim <= 32)
      body(type, Width<32>());
    else if (dim <= 64)
      body(type, Width<64>());
    else
      body(type, Width<128>());
  };
  switch (dtype) {
    case DType::f16:
      with_width(__half());
      break;
    case DType::bf16:
      with_width(__nv_bfloat16());
      break;
    default:
      ALLOY_CHECK(false, op, ": the tensor-core kernels take f16 and bf16, not ",
                  dtype_name(dtype));
  }
}

dim3 grid_of(const AttentionGeometry& g) {
  return dim3(static_cast<unsigned int>((g.time + kBlockRows - 1) / kBlockRows),
              static_cast<unsigned int>(g.batch * g.heads));
}

}  // namespace

void attention_forward_half(const void* qkv, DType dtype, const AttentionGeometry& g, void* y,
                            float* lse, const AttentionDropoutBits& dropout, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(g.head_dim));
  dispatch_half_width(dtype, g.head_dim, "attention_forward", [&](auto type, auto width) {
    using T = decltype(type);
    ALLOY_LAUNCH(forward_kernel, grid_of(g), kBlockThreads, 0, stream)
    (static_cast<const T*>(qkv), g, scale, static_cast<T*>(y), lse, dropout, width);
    ALLOY_CUDA_CHECK_LAUNCH("attention forward_kernel (tensor cores) over ", g.batch, "x", g.time,
                            " with ", g.heads, " heads of ", g.head_dim);
  });
}

void attention_backward_half(const void* dy, const void* qkv, const float* lse, const float* delta,
                             DType dtype, const AttentionGeometry& g, void* dqkv,
                             const AttentionDropoutBits& dropout, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(g.head_dim));
  dispatch_half_width(dtype, g.head_dim, "attention_backward", [&](auto type, auto width) {
    using T = decltype(type);
    const T* grad = static_cast<const T*>(dy);
    const T* in = static_cast<const T*>(qkv);
    T* out = static_cast<T*>(dqkv);
    ALLOY_LAUNCH(dkdv_kernel, grid_of(g), kBlockThreads, 0, stream)
    (in, grad, lse, delta, g, scale, dropout, out, width);
    ALLOY_CUDA_CHECK_LAUNCH("attention dkdv_kernel (tensor cores) over ", g.batch, "x", g.time,
                            " with ", g.heads, " heads of ", g.head_dim);
    ALLOY_LAUNCH(dq_kernel, grid_of(g), kBlockThreads, 0, stream)
    (in, grad, lse, delta, g, scale, dropout, out, width);
    ALLOY_CUDA_CHECK_LAUNCH("attention dq_kernel (tensor cores) over ", g.batch, "x", g.time,
                            " with ", g.heads, " heads of ", g.head_dim);
  });
}

}  // namespace alloy::cuda
