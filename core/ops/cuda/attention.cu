#include <climits>

#include "core/ops/cuda/attention.h"
#include "core/ops/cuda/attention_common.cuh"
#include "core/ops/cuda/attention_half.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/last_block.h"

namespace alloy::cuda {

namespace {

constexpr int kMaxDim = 128;
constexpr int kDimPerLane = kMaxDim / 32;
constexpr int kKeys = 32;  // keys per tile: one per lane
constexpr int kWarps = 4;
constexpr int kBlockThreads = 32 * kWarps;
constexpr int kForwardRows = 16;  // query rows per forward block
constexpr int kBackwardRows = 8;  // query rows per backward tile (shared memory stays < 48 KiB)

// rows x dim elements of a head into a tile (zero beyond T), all threads of the block.
template <int Stride>
__device__ void load_tile(float (*tile)[Stride], int rows, const float* data, const HeadView& v,
                          std::int64_t first, int part) {
  for (int e = threadIdx.x; e < rows * v.dim; e += blockDim.x) {
    const int r = e / static_cast<int>(v.dim);
    const int d = e - r * static_cast<int>(v.dim);
    const std::int64_t t = first + r;
    tile[r][d] = t < v.time ? data[v.at(t, part) + d] : 0.0f;
  }
}

template <int Stride>
__device__ __forceinline__ float tile_dot(const float* a, const float (*tile)[Stride], int row,
                                          std::int64_t dim) {
  float sum = 0.0f;
  for (int d = 0; d < dim; ++d)
    sum += a[d] * tile[row][d];
  return sum;
}

__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(const float* qkv, AttentionGeometry g, float scale, float* y, float* lse,
                   AttentionDropoutBits dropout) {
  __shared__ float q_tile[kForwardRows][kMaxDim];
  __shared__ float k_tile[kKeys][kMaxDim + 1];  // padded: lanes read different rows
  __shared__ float v_tile[kKeys][kMaxDim];
  __shared__ float p_tile[kForwardRows][kKeys];
  const HeadView view = head_view(g);
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * kForwardRows;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  constexpr int kRowsPerWarp = kForwardRows / kWarps;
  const bool drops = dropout.step != nullptr;
  const auto step = drops ? static_cast<std::uint32_t>(*dropout.step) : 0u;
  load_tile(q_tile, kForwardRows, qkv, view, row0, 0);
  float m[kRowsPerWarp], l[kRowsPerWarp], alpha[kRowsPerWarp];
  float acc[kRowsPerWarp][kDimPerLane];
  ALLOY_UNROLL
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
    ALLOY_UNROLL
    for (int c = 0; c < kDimPerLane; ++c)
      acc[i][c] = 0.0f;
  }
  const std::int64_t last_row = min(row0 + kForwardRows, g.time) - 1;
  for (std::int64_t key0 = 0; key0 <= last_row; key0 += kKeys) {
    __syncthreads();  // the previous tile's readers are done (and q_tile is loaded)
    load_tile(k_tile, kKeys, qkv, view, key0, 1);
    load_tile(v_tile, kKeys, qkv, view, key0, 2);
    __syncthreads();
    ALLOY_UNROLL
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      const std::int64_t t = row0 + r;
      const std::int64_t key = key0 + lane;
      const bool valid = t < g.time && key <= t;
      const float s = valid ? tile_dot(q_tile[r], k_tile, lane, view.dim) * scale : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));
      // A row past T (or with no key yet) keeps m = -inf: no exp of inf - inf.
      const float p = valid ? expf(s - m_new) : 0.0f;
      alpha[i] = m_new == -INFINITY ? 1.0f : expf(m[i] - m_new);
      l[i] = l[i] * alpha[i] + warp_sum(p);
      m[i] = m_new;
      // The softmax normalises over every key; dropout scales what multiplies v.
      p_tile[r][lane] =
          drops && valid ? p * attention_keep_factor(dropout, step, view.b, view.h, t, key, g.time)
                         : p;
    }
    __syncthreads();
    ALLOY_UNROLL
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      ALLOY_UNROLL
      for (int c = 0; c < kDimPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d >= view.dim) continue;
        float sum = 0.0f;
        for (int j = 0; j < kKeys; ++j)
          sum += p_tile[r][j] * v_tile[j][d];
        acc[i][c] = acc[i][c] * alpha[i] + sum;
      }
    }
  }
  ALLOY_UNROLL
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const std::int64_t t = row0 + warp * kRowsPerWarp + i;
    if (t >= g.time) continue;
    const float inverse = 1.0f / l[i];
    ALLOY_UNROLL
    for (int c = 0; c < kDimPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < view.dim) y[view.out_at(t) + d] = acc[i][c] * inverse;
    }
    if (lse != nullptr && lane == 0)
      lse[(view.b * g.heads + view.h) * g.time + t] = m[i] + logf(l[i]);
  }
}

// delta[b, h, t] = sum_d dy * y: a warp per row.
template <class T>
__global__ void delta_kernel(const T* dy, const T* y, AttentionGeometry g, float* delta) {
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= g.batch * g.heads * g.time) return;
  const std::int64_t t = row % g.time;
  const std::int64_t bh = row / g.time;
  const std::int64_t h = bh % g.heads, b = bh / g.heads;
  const std::int64_t at = (b * g.time + t) * g.heads * g.head_dim + h * g.head_dim;
  float sum = 0.0f;
  for (std::int64_t d = lane; d < g.head_dim; d += 32)
    sum += widen(dy[at + d]) * widen(y[at + d]);
  sum = warp_sum(sum);
  if (lane == 0) delta[row] = sum;
}

// The shared tiles of both backward kernels: kBackwardRows query rows (q, dy, lse, delta) and
// kKeys keys (k, v), and the rows' probabilities and score gradients against the keys.
struct BackwardTiles {
  float q[kBackwardRows][kMaxDim];
  float dy[kBackwardRows][kMaxDim];
  float k[kKeys][kMaxDim + 1];
  float v[kKeys][kMaxDim + 1];
  float p[kBackwardRows][kKeys + 1];
  float ds[kBackwardRows][kKeys + 1];
  float lse[kBackwardRows];
  float delta[kBackwardRows];
};

__device__ void load_rows(BackwardTiles& s, const float* qkv, const float* dy, const float* lse,
                          const float* delta, const HeadView& v, const AttentionGeometry& g,
                          std::int64_t row0) {
  load_tile(s.q, kBackwardRows, qkv, v, row0, 0);
  load_tile(s.dy, kBackwardRows, dy, v, row0, -1);
  if (threadIdx.x < kBackwardRows) {
    const std::int64_t t = row0 + threadIdx.x;
    const std::int64_t at = (v.b * g.heads + v.h) * g.time + t;
    s.lse[threadIdx.x] = t < g.time ? lse[at] : 0.0f;
    s.delta[threadIdx.x] = t < g.time ? delta[at] : 0.0f;
  }
}

// p (times the dropout factor) and ds of the tile's rows against its keys (zero where masked):
// warp w, rows
// kBackwardRows / kWarps * w on, a lane per key.
__device__ void probabilities(BackwardTiles& s, std::int64_t row0, std::int64_t key0,
                              const HeadView& view, const AttentionGeometry& g, float scale,
                              const AttentionDropoutBits& dropout) {
  const std::int64_t time = g.time, dim = view.dim;
  const bool drops = dropout.step != nullptr;
  const auto step = drops ? static_cast<std::uint32_t>(*dropout.step) : 0u;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  constexpr int kRowsPerWarp = kBackwardRows / kWarps;
  ALLOY_UNROLL
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp * kRowsPerWarp + i;
    const std::int64_t t = row0 + r;
    const std::int64_t key = key0 + lane;
    float p = 0.0f, ds = 0.0f;
    if (t < time && key <= t) {
      const float z =
          drops ? attention_keep_factor(dropout, step, view.b, view.h, t, key, time) : 1.0f;
      const float p_tj = expf(tile_dot(s.q[r], s.k, lane, dim) * scale - s.lse[r]);
      ds = p_tj * (z * tile_dot(s.dy[r], s.v, lane, dim) - s.delta[r]);
      p = p_tj * z;  // what the forward multiplied v by
    }
    s.p[r][lane] = p;
    s.ds[r][lane] = ds;
  }
}

// dk and dv of kKeys keys: warp w owns keys 8w..8w+7, a lane D / 32 columns of each.
__global__ void __launch_bounds__(kBlockThreads)
    dkdv_kernel(const float* qkv, const float* dy, const float* lse, const float* delta,
                AttentionGeometry g, float scale, AttentionDropoutBits dropout, float* dqkv) {
  __shared__ BackwardTiles s;
  const HeadView view = head_view(g);
  const std::int64_t key0 = static_cast<std::int64_t>(blockIdx.x) * kKeys;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  constexpr int kKeysPerWarp = kKeys / kWarps;
  float dk[kKeysPerWarp][kDimPerLane] = {};
  float dv[kKeysPerWarp][kDimPerLane] = {};
  load_tile(s.k, kKeys, qkv, view, key0, 1);
  load_tile(s.v, kKeys, qkv, view, key0, 2);
  // Query rows before key0 see none of these keys.
  for (std::int64_t row0 = key0 / kBackwardRows * kBackwardRows; row0 < g.time;
       row0 += kBackwardRows) {
    __syncthreads();  // the previous rows' readers are done
    load_rows(s, qkv, dy, lse, delta, view, g, row0);
    __syncthreads();
    probabilities(s, row0, key0, view, g, scale, dropout);
    __syncthreads();
    ALLOY_UNROLL
    for (int kk = 0; kk < kKeysPerWarp; ++kk) {
      const int j = warp * kKeysPerWarp + kk;
      ALLOY_UNROLL
      for (int c = 0; c < kDimPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d >= view.dim) continue;
        float sum_k = 0.0f, sum_v = 0.0f;
        for (int r = 0; r < kBackwardRows; ++r) {
          sum_k += s.ds[r][j] * s.q[r][d];
          sum_v += s.p[r][j] * s.dy[r][d];
        }
        dk[kk][c] += sum_k;
        dv[kk][c] += sum_v;
      }
    }
  }
  ALLOY_UNROLL
  for (int kk = 0; kk < kKeysPerWarp; ++kk) {
    const std::int64_t key = key0 + warp * kKeysPerWarp + kk;
    if (key >= g.time) continue;
    ALLOY_UNROLL
    for (int c = 0; c < kDimPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d >= view.dim) continue;
      dqkv[view.qkv_at(key, 1) + d] = dk[kk][c] * scale;
      dqkv[view.qkv_at(key, 2) + d] = dv[kk][c];
    }
  }
}

// dq of kBackwardRows query rows: warp w owns rows 2w, 2w + 1, a lane D / 32 columns.
__global__ void __launch_bounds__(kBlockThreads)
    dq_kernel(const float* qkv, const float* dy, const float* lse, const float* delta,
              AttentionGeometry g, float scale, AttentionDropoutBits dropout, float* dqkv) {
  __shared__ BackwardTiles s;
  const HeadView view = head_view(g);
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.x) * kBackwardRows;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  constexpr int kRowsPerWarp = kBackwardRows / kWarps;
  float dq[kRowsPerWarp][kDimPerLane] = {};
  load_rows(s, qkv, dy, lse, delta, view, g, row0);
  const std::int64_t last_row = min(row0 + kBackwardRows, g.time) - 1;
  for (std::int64_t key0 = 0; key0 <= last_row; key0 += kKeys) {
    __syncthreads();
    load_tile(s.k, kKeys, qkv, view, key0, 1);
    load_tile(s.v, kKeys, qkv, view, key0, 2);
    __syncthreads();
    probabilities(s, row0, key0, view, g, scale, dropout);
    __syncthreads();
    ALLOY_UNROLL
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp * kRowsPerWarp + i;
      ALLOY_UNROLL
      for (int c = 0; c < kDimPerLane; ++c) {
        const int d = lane + 32 * c;
        if (d >= view.dim) continue;
        float sum = 0.0f;
        for (int j = 0; j < kKeys; ++j)
          sum += s.ds[r][j] * s.k[j][d];
        dq[i][c] += sum;
      }
    }
  }
  ALLOY_UNROLL
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const std::int64_t t = row0 + warp * kRowsPerWarp + i;
    if (t >= g.time) continue;
    ALLOY_UNROLL
    for (int c = 0; c < kDimPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < view.dim) dqkv[view.qkv_at(t, 0) + d] = dq[i][c] * scale;
    }
  }
}

void check_geometry(const AttentionGeometry& g, const char* op) {
  ALLOY_CHECK(g.head_dim <= kMaxDim, op, ": the CUDA kernel takes head sizes up to ", kMaxDim,
              ", got ", g.head_dim);
  ALLOY_CHECK(g.batch * g.heads <= 65535, op, ": ", g.batch, " sequences x ", g.heads,
              " heads are more than one grid's y dimension");
  ALLOY_CHECK(g.time <= INT_MAX / 2, op, ": ", g.time, " positions are too many");
}

unsigned int tiles(std::int64_t time, int rows) {
  return static_cast<unsigned int>((time + rows - 1) / rows);
}

}  // namespace

void attention_forward(const void* qkv, DType dtype, const AttentionGeometry& g, void* y,
                       float* lse, const AttentionDropoutBits& dropout, cudaStream_t stream) {
  check_geometry(g, "attention_forward");
  if (g.batch * g.time * g.heads == 0) return;
  if (dtype != DType::f32) return attention_forward_half(qkv, dtype, g, y, lse, dropout, stream);
  const float scale = 1.0f / sqrtf(static_cast<float>(g.head_dim));
  const dim3 grid(tiles(g.time, kForwardRows), static_cast<unsigned int>(g.batch * g.heads));
  ALLOY_LAUNCH(forward_kernel, grid, kBlockThreads, 0, stream)
  (static_cast<const float*>(qkv), g, scale, static_cast<float*>(y), lse, dropout);
  ALLOY_CUDA_CHECK_LAUNCH("attention forward_kernel over ", g.batch, "x", g.time, " with ", g.heads,
                          " heads of ", g.head_dim);
}

void attention_backward(const void* dy, const void* qkv, const void* y, const float* lse,
                        DType dtype, const AttentionGeometry& g, void* dqkv,
                        const AttentionDropoutBits& dropout, cudaStream_t stream) {
  check_geometry(g, "attention_backward");
  const std::int64_t rows = g.batch * g.heads * g.time;
  if (rows == 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(g.head_dim));
  const DeviceBuffer delta = reduction_workspace(sizeof(float) * static_cast<std::size_t>(rows));
  dispatch_floating(dtype, "attention_backward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(delta_kernel, static_cast<unsigned int>((rows + kWarps - 1) / kWarps),
                 kBlockThreads, 0, stream)
    (static_cast<const T*>(dy), static_cast<const T*>(y), g, delta.as<float>());
    ALLOY_CUDA_CHECK_LAUNCH("attention delta_kernel over ", rows, " rows");
  });
  if (dtype != DType::f32)
    return attention_backward_half(dy, qkv, lse, delta.as<float>(), dtype, g, dqkv, dropout,
                                   stream);
  const auto sequences = static_cast<unsigned int>(g.batch * g.heads);
  const auto* grad = static_cast<const float*>(dy);
  const auto* in = static_cast<const float*>(qkv);
  auto* out = static_cast<float*>(dqkv);
  ALLOY_LAUNCH(dkdv_kernel, dim3(tiles(g.time, kKeys), sequences), kBlockThreads, 0, stream)
  (in, grad, lse, delta.as<float>(), g, scale, dropout, out);
  ALLOY_CUDA_CHECK_LAUNCH("attention dkdv_kernel over ", g.batch, "x", g.time, " with ", g.heads,
                          " heads of ", g.head_dim);
  ALLOY_LAUNCH(dq_kernel, dim3(tiles(g.time, kBackwardRows), sequences), kBlockThreads, 0, stream)
  (in, grad, lse, delta.as<float>(), g, scale, dropout, out);
  ALLOY_CUDA_CHECK_LAUNCH("attention dq_kernel over ", g.batch, "x", g.time, " with ", g.heads,
                          " heads of ", g.head_dim);
}

}  // namespace alloy::cuda
