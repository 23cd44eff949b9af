#include "core/ops/cuda/conv2d_implicit_gemm.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/ops/cuda/chunk_partials.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/int_divider.h"

namespace alloy::cuda {

namespace {

using cpu::Conv2dGeometry;

// The product's tiles. A warp computes 32 rows x 16 columns, a lane 4x4 sums of them
// (thread_tile). A block has kWarpColumns warps
// across and 1 (forward: 32 positions x 64 filters, 128 threads, so that LeNet's 20736 positions
// make 648 blocks, about 5 an SM, not 2.5 with 64-row tiles) or 2 (filter gradient: 64 filters
// x 64 taps, 256 threads) down.
constexpr int kSlice = 16;  // the reduction's depth staged at a time
constexpr int kWarpRows = 32, kWarpColumns = 4, kWarpTileColumns = 16;
constexpr int kColumns = kWarpColumns * kWarpTileColumns;
constexpr int kSum = 4;  // a thread's sums: kSum x kSum
// Each staged row is padded by 4 floats: the slices' stores, a column of 16 k's a warp, then
// meet 2 banks each instead of 16, and every row still starts 16-byte aligned.
constexpr int kPad = 4;

// Forward blocks: 1 warp row. Filter-gradient blocks: 2.
constexpr int kForwardWarpRows = 1, kFilterWarpRows = 2;
constexpr int threads_of(int warp_rows) {
  return 32 * warp_rows * kWarpColumns;
}

// The forward's table of tap offsets in shared memory: 1024 or 4096 taps (8 or 32 KB).
constexpr int kSmallTable = 1024, kLargeTable = 4096;

// Blocks the filter gradient aims for, by the shape alone (so the chunks, and the sums' bits,
// are the same on any GPU): 2 an SM of an H100's or H200's 132.
constexpr int kFilterBlocks = 264;

// The sizes the kernels index with, in 32 bits (conv2d_igemm_supports keeps them there).
struct GemmShape {
  int channels, height, width, filters, kernel_w;
  int taps;       // C*R*S: the forward's reduction, the filter gradient's columns
  int positions;  // N*P*Q: the forward's rows, the filter gradient's reduction
  int image;      // C*H*W
  int out_plane;  // P*Q
  int stride_h, stride_w, pad_h, pad_w;
  IntDivider planes;                       // by P*Q: a position's image
  IntDivider columns;                      // by Q: its row
  IntDivider filter_taps, kernel_columns;  // by R*S and by S: a tap's channel and row
};

GemmShape shape_of(const Conv2dGeometry& g) {
  const int rs = g.kernel_h * g.kernel_w;
  return {g.channels,
          g.height,
          g.width,
          g.filters,
          g.kernel_w,
          g.channels * rs,
          g.batch * g.out_h * g.out_w,
          g.channels * g.height * g.width,
          g.out_h * g.out_w,
          g.params.stride_h,
          g.params.stride_w,
          g.params.pad_h,
          g.params.pad_w,
          IntDivider(static_cast<std::uint32_t>(std::max(g.out_h * g.out_w, 1))),
          IntDivider(static_cast<std::uint32_t>(std::max(g.out_w, 1))),
          IntDivider(static_cast<std::uint32_t>(rs)),
          IntDivider(static_cast<std::uint32_t>(g.kernel_w))};
}

// Tap k = (c, r, s) of a filter: its offset in x from a patch's corner, and its row and column.
struct Tap {
  int offset;
  int r, s;
};

__device__ __forceinline__ Tap tap_of(const GemmShape& d, int k) {
  const IntDivider::QuotientRemainder c = d.filter_taps.divmod(static_cast<std::uint32_t>(k));
  const IntDivider::QuotientRemainder rs = d.kernel_columns.divmod(c.remainder);
  const int r = static_cast<int>(rs.quotient), s = static_cast<int>(rs.remainder);
  return {static_cast<int>(c.quotient) * d.height * d.width + r * d.width + s, r, s};
}

// Position m = (n, p, q) of the output: the input offset of its patch's corner (row h0 =
// p*stride - pad, column w0), which padding may place outside the image, and its dy/y offset
// from filter 0 (n*K*P*Q + p*Q + q).
struct Position {
  int corner, h0, w0, out;
};

__device__ __forceinline__ Position position_of(const GemmShape& d, int m) {
  const IntDivider::QuotientRemainder n = d.planes.divmod(static_cast<std::uint32_t>(m));
  const IntDivider::QuotientRemainder pq = d.columns.divmod(n.remainder);
  const int h0 = static_cast<int>(pq.quotient) * d.stride_h - d.pad_h;
  const int w0 = static_cast<int>(pq.remainder) * d.stride_w - d.pad_w;
  const int image = static_cast<int>(n.quotient);
  return {image * d.image + h0 * d.width + w0, h0, w0,
          image * d.filters * d.out_plane + static_cast<int>(n.remainder)};
}

// x at tap (offset, r, s) of the patch at `p`, widened; 0 in the padding.
template <class T>
__device__ __forceinline__ float patch_value(const T* x, const GemmShape& d, const Position& p,
                                             int offset, int r, int s) {
  const bool inside = static_cast<unsigned int>(p.h0 + r) < static_cast<unsigned int>(d.height) &&
                      static_cast<unsigned int>(p.w0 + s) < static_cast<unsigned int>(d.width);
  return inside ? widen(x[p.corner + offset]) : 0.0f;
}

// One slice of the block's product: acc[i][j] += a[kk][row + i] * b[kk][column + j] for kk in
// order, the thread's rows and columns read as 16-byte vectors.
template <int kRows>
__device__ __forceinline__ void multiply_slice(const float (&a)[kSlice][kRows + kPad],
                                               const float (&b)[kSlice][kColumns + kPad], int row,
                                               int column, float (&acc)[kSum][kSum]) {
  ALLOY_UNROLL
  for (int kk = 0; kk < kSlice; ++kk) {
    const float4 a4 = *reinterpret_cast<const float4*>(&a[kk][row]);
    const float4 b4 = *reinterpret_cast<const float4*>(&b[kk][column]);
    const float av[kSum] = {a4.x, a4.y, a4.z, a4.w};
    const float bv[kSum] = {b4.x, b4.y, b4.z, b4.w};
    ALLOY_UNROLL
    for (int i = 0; i < kSum; ++i) {
      ALLOY_UNROLL
      for (int j = 0; j < kSum; ++j)
        acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
  }
}

// The thread's first row and column in its block's tile.
struct ThreadTile {
  int row, column;
};

// The thread's first row and column in its block's tile. A lane's row takes lane bits 0, 2 and
// 3, its column bits 1 and 4, so that lanes n and n ^ 2 read the same a vector and lanes n and
// n ^ 1 the same b vector: shared memory returns 128 bytes a cycle, an LDS.128 of distinct
// addresses takes 4 cycles a warp, and pairs reading alike can halve that (documented for
// compute capability 7.x), which 16 multiply-adds a thread (4 cycles of an SM's FMA pipes a
// warp) need to keep up.
__device__ __forceinline__ ThreadTile thread_tile() {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int lane_row = (lane & 1) | ((lane >> 1) & 6);
  const int lane_column = ((lane >> 1) & 1) | ((lane >> 3) & 2);
  return {(warp / kWarpColumns) * kWarpRows + lane_row * kSum,
          (warp % kWarpColumns) * kWarpTileColumns + lane_column * kSum};
}

// y[n, f, p, q] = sum over taps k of patches[m][k] w[f][k] (+ b[f]), for the block's 32
// positions m (blockIdx.x) and 64 filters f (blockIdx.y). Thread t stages the patches' values
// of position t % 32 and taps t / 32 + 4i (a warp reads one tap of 32 consecutive positions),
// and the filters' values of tap t % 16 and filters t / 16 + 8i (16 consecutive taps of a
// filter); the next slice is loaded while this one is summed.
template <class T, int kTableTaps>
__global__ void __launch_bounds__(threads_of(kForwardWarpRows))
    igemm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                         T* __restrict__ y, GemmShape d, std::integral_constant<int, kTableTaps>) {
  constexpr int kThreadsHere = threads_of(kForwardWarpRows);
  constexpr int kRows = kForwardWarpRows * kWarpRows;
  constexpr int kPatchLoads = kSlice * kRows / kThreadsHere;      // 4
  constexpr int kFilterLoads = kSlice * kColumns / kThreadsHere;  // 8
  __shared__ int2 table[kTableTaps];  // (offset, r << 16 | s) of each tap
  __shared__ __align__(16) float patches[kSlice][kRows + kPad];
  __shared__ __align__(16) float filters[kSlice][kColumns + kPad];
  const int t = static_cast<int>(threadIdx.x);
  for (int k = t; k < d.taps; k += kThreadsHere) {
    const Tap tap = tap_of(d, k);
    table[k] = make_int2(tap.offset, tap.r << 16 | tap.s);
  }
  const int m = static_cast<int>(blockIdx.x) * kRows + t % kRows;
  const bool has_position = m < d.positions;
  const Position position = position_of(d, has_position ? m : 0);
  const int f0 = static_cast<int>(blockIdx.y) * kColumns;
  __syncthreads();  // the table

  float patch_next[kPatchLoads], filter_next[kFilterLoads];
  const auto load = [&](int k0) {
    ALLOY_UNROLL
    for (int i = 0; i < kPatchLoads; ++i) {
      const int k = k0 + t / kRows + (kThreadsHere / kRows) * i;
      float value = 0.0f;
      if (has_position && k < d.taps) {
        const int2 entry = table[k];
        value = patch_value(x, d, position, entry.x, entry.y >> 16, entry.y & 0xffff);
      }
      patch_next[i] = value;
    }
    ALLOY_UNROLL
    for (int i = 0; i < kFilterLoads; ++i) {
      const int k = k0 + t % kSlice, f = f0 + t / kSlice + (kThreadsHere / kSlice) * i;
      filter_next[i] = k < d.taps && f < d.filters ? widen(w[f * d.taps + k]) : 0.0f;
    }
  };
  const auto stage = [&] {
    ALLOY_UNROLL
    for (int i = 0; i < kPatchLoads; ++i)
      patches[t / kRows + (kThreadsHere / kRows) * i][t % kRows] = patch_next[i];
    ALLOY_UNROLL
    for (int i = 0; i < kFilterLoads; ++i)
      filters[t % kSlice][t / kSlice + (kThreadsHere / kSlice) * i] = filter_next[i];
  };

  const ThreadTile tile = thread_tile();
  float acc[kSum][kSum] = {};
  const int slices = (d.taps + kSlice - 1) / kSlice;
  load(0);
  stage();
  __syncthreads();
  for (int slice = 0; slice < slices; ++slice) {
    const bool more = slice + 1 < slices;
    if (more) load((slice + 1) * kSlice);
    multiply_slice<kRows>(patches, filters, tile.row, tile.column, acc);
    __syncthreads();  // the slice is no longer read
    if (more) {
      stage();
      __syncthreads();
    }
  }

  const int block_m = static_cast<int>(blockIdx.x) * kRows;
  ALLOY_UNROLL
  for (int i = 0; i < kSum; ++i) {
    const int row = block_m + tile.row + i;
    if (row >= d.positions) break;
    const int out = position_of(d, row).out;
    ALLOY_UNROLL
    for (int j = 0; j < kSum; ++j) {
      const int f = f0 + tile.column + j;
      if (f >= d.filters) break;
      const float sum = b != nullptr ? __fadd_rn(acc[i][j], widen(b[f])) : acc[i][j];
      y[out + f * d.out_plane] = narrow<T>(sum);
    }
  }
}

// How the filter gradient splits its reduction over the positions: `chunks` chunks of
// `positions` each (a multiple of the slice; the last may be shorter).
struct FilterChunks {
  int chunks, positions;
};

// Tiles of 64 (filters or taps: the forward's columns, the filter gradient's rows and columns).
constexpr int kTile = 64;
static_assert(kColumns == kTile && kFilterWarpRows * kWarpRows == kTile, "tiles of 64");
constexpr int tiles_of(std::int64_t count) {
  return static_cast<int>((count + kTile - 1) / kTile);
}

FilterChunks filter_chunks(const Conv2dGeometry& g) {
  const std::int64_t positions = std::int64_t{g.batch} * g.out_h * g.out_w;
  const int tiles = tiles_of(g.filters) * tiles_of(g.channels * g.kernel_h * g.kernel_w);
  // At least 4 slices a chunk.
  const std::int64_t most = std::max<std::int64_t>((positions + 4 * kSlice - 1) / (4 * kSlice), 1);
  const std::int64_t wanted =
      std::clamp<std::int64_t>((kFilterBlocks + tiles - 1) / tiles, 1, most);
  const std::int64_t per_chunk = ((positions + wanted - 1) / wanted + kSlice - 1) / kSlice * kSlice;
  return {static_cast<int>(std::max<std::int64_t>((positions + per_chunk - 1) / per_chunk, 1)),
          static_cast<int>(per_chunk)};
}

// One chunk's partials[chunk][f][k] = sum over its positions m of dy[m][f] patches[m][k], for
// the block's 64 filters f (blockIdx.y) and 64 taps k (blockIdx.x); the chunk is blockIdx.z.
// Thread t stages position t % 16 of a slice: its dy of filters t / 16 + 16i and its patches'
// values of taps t / 16 + 16i (16 consecutive positions a half warp: coalesced along q).
template <class T>
__global__ void __launch_bounds__(threads_of(kFilterWarpRows))
    igemm_filter_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                        float* __restrict__ partials, GemmShape d, FilterChunks split) {
  constexpr int kThreadsHere = threads_of(kFilterWarpRows);
  constexpr int kRows = kFilterWarpRows * kWarpRows;
  constexpr int kLoads = kSlice * kColumns / kThreadsHere;  // 4 of each operand
  constexpr int kStride = kThreadsHere / kSlice;            // 16
  __shared__ __align__(16) float gradients[kSlice][kRows + kPad];
  __shared__ __align__(16) float patches[kSlice][kColumns + kPad];
  const int t = static_cast<int>(threadIdx.x);
  const int f0 = static_cast<int>(blockIdx.y) * kRows;
  const int k0 = static_cast<int>(blockIdx.x) * kColumns;
  const int chunk = static_cast<int>(blockIdx.z);
  const int begin = chunk * split.positions;
  const int end = min(begin + split.positions, d.positions);

  // This thread's taps stay the same for every slice.
  Tap taps[kLoads];
  bool has_tap[kLoads];
  ALLOY_UNROLL
  for (int i = 0; i < kLoads; ++i) {
    const int k = k0 + t / kSlice + kStride * i;
    has_tap[i] = k < d.taps;
    taps[i] = tap_of(d, has_tap[i] ? k : 0);
  }

  float gradient_next[kLoads], patch_next[kLoads];
  const auto load = [&](int m0) {
    const int m = m0 + t % kSlice;
    const bool has_position = m < end;
    const Position p = position_of(d, has_position ? m : begin);
    ALLOY_UNROLL
    for (int i = 0; i < kLoads; ++i) {
      const int f = f0 + t / kSlice + kStride * i;
      gradient_next[i] = has_position && f < d.filters ? widen(dy[p.out + f * d.out_plane]) : 0.0f;
      patch_next[i] = has_position && has_tap[i]
                          ? patch_value(x, d, p, taps[i].offset, taps[i].r, taps[i].s)
                          : 0.0f;
    }
  };
  const auto stage = [&] {
    ALLOY_UNROLL
    for (int i = 0; i < kLoads; ++i) {
      gradients[t % kSlice][t / kSlice + kStride * i] = gradient_next[i];
      patches[t % kSlice][t / kSlice + kStride * i] = patch_next[i];
    }
  };

  const ThreadTile tile = thread_tile();
  float acc[kSum][kSum] = {};
  const int slices = (end - begin + kSlice - 1) / kSlice;
  load(begin);
  stage();
  __syncthreads();
  for (int slice = 0; slice < slices; ++slice) {
    const bool more = slice + 1 < slices;
    if (more) load(begin + (slice + 1) * kSlice);
    multiply_slice<kRows>(gradients, patches, tile.row, tile.column, acc);
    __syncthreads();
    if (more) {
      stage();
      __syncthreads();
    }
  }

  float* const own = partials + static_cast<std::int64_t>(chunk) * d.filters * d.taps;
  ALLOY_UNROLL
  for (int i = 0; i < kSum; ++i) {
    const int f = f0 + tile.row + i;
    if (f >= d.filters) break;
    ALLOY_UNROLL
    for (int j = 0; j < kSum; ++j) {
      const int k = k0 + tile.column + j;
      if (k >= d.taps) break;
      own[f * d.taps + k] = acc[i][j];
    }
  }
}

bool fits_32_bits(std::int64_t count) {
  return count <= std::numeric_limits<int>::max();
}

}  // namespace

bool conv2d_igemm_supports(const Conv2dGeometry& g, DType dtype, ConvDirection direction) {
  const std::int64_t taps = std::int64_t{g.channels} * g.kernel_h * g.kernel_w;
  if (!conv2d_kernels_take(g, dtype) || !fits_32_bits(taps * g.filters)) return false;
  switch (direction) {
    case ConvDirection::forward:
      return taps <= kLargeTable && tiles_of(g.filters) <= 65535;
    case ConvDirection::data:
      return false;
    case ConvDirection::filter:
      return tiles_of(g.filters) <= 65535 &&
             fits_32_bits(std::int64_t{filter_chunks(g).chunks} * g.filters * taps);
  }
  return false;
}

std::size_t conv2d_igemm_filter_workspace(const Conv2dGeometry& g) {
  return sizeof(float) * static_cast<std::size_t>(filter_chunks(g).chunks) * g.filters *
         g.channels * g.kernel_h * g.kernel_w;
}

void conv2d_igemm_forward(const Conv2dGeometry& g, DType dtype, const void* x, const void* w,
                          const void* b, void* y, cudaStream_t stream) {
  ALLOY_CHECK(conv2d_igemm_supports(g, dtype, ConvDirection::forward),
              "conv2d_igemm_forward: the implicit-GEMM kernels do not take this convolution");
  const GemmShape d = shape_of(g);
  constexpr int kRows = kForwardWarpRows * kWarpRows;
  const dim3 grid((d.positions + kRows - 1) / kRows, tiles_of(d.filters));
  dispatch_floating(dtype, "conv2d_igemm_forward", [&](auto type) {
    using T = decltype(type);
    const auto launch = [&](auto table) {
      ALLOY_LAUNCH(igemm_forward_kernel, grid, threads_of(kForwardWarpRows), 0, stream)
      (static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
       static_cast<T*>(y), d, table);
    };
    d.taps <= kSmallTable ? launch(std::integral_constant<int, kSmallTable>{})
                          : launch(std::integral_constant<int, kLargeTable>{});
    ALLOY_CUDA_CHECK_LAUNCH("conv2d igemm_forward_kernel over ", d.positions, " positions, ",
                            d.filters, " filters of ", d.taps, " taps");
  });
}

void conv2d_igemm_filter(const Conv2dGeometry& g, DType dtype, const void* x, const void* dy,
                         void* dw, bool accumulate, void* workspace, std::size_t workspace_bytes,
                         cudaStream_t stream) {
  ALLOY_CHECK(conv2d_igemm_supports(g, dtype, ConvDirection::filter),
              "conv2d_igemm_filter: the implicit-GEMM kernels do not take this convolution");
  ALLOY_CHECK(workspace_bytes >= conv2d_igemm_filter_workspace(g),
              "conv2d_igemm_filter: a workspace of ", workspace_bytes, " bytes, not the ",
              conv2d_igemm_filter_workspace(g), " it needs");
  const GemmShape d = shape_of(g);
  const FilterChunks split = filter_chunks(g);
  float* const partials = static_cast<float*>(workspace);
  const dim3 grid(tiles_of(d.taps), tiles_of(d.filters), split.chunks);
  dispatch_floating(dtype, "conv2d_igemm_filter", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(igemm_filter_kernel, grid, threads_of(kFilterWarpRows), 0, stream)
    (static_cast<const T*>(x), static_cast<const T*>(dy), partials, d, split);
    ALLOY_CUDA_CHECK_LAUNCH("conv2d igemm_filter_kernel over ", split.chunks, " chunks of ",
                            split.positions, " positions, ", d.filters, " filters of ", d.taps,
                            " taps");
  });
  add_chunk_partials(partials, split.chunks, d.filters * d.taps, dw, dtype, accumulate, stream);
}

}  // namespace alloy::cuda
