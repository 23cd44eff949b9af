#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/ops/cuda/chunk_partials.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/conv2d_direct.h"
#include "core/ops/cuda/int_divider.h"

namespace alloy::cuda {

namespace {

using cpu::Conv2dGeometry;

constexpr int kTile = 8;  // outputs a thread computes: filters, or input channels for dx
constexpr int kDirectThreads = 256;
// Threads of a forward block (the input gradient's too). Blocks of 64 spread LeNet's second
// convolution more evenly (4-5 a SM, not 2-3) but measured no faster, and made its first
// convolution and its input gradient slower.
constexpr int kSpanThreads = 128;
constexpr int kMaxFilterTaps = 1536;   // C*R*S (forward, filter) or K*R*S (data) of a tile
constexpr int kMaxFilterPlane = 1536;  // output positions of one image (filter gradient)
// Blocks the filter gradient aims for: the batch is cut into enough chunks for 4 blocks on each
// of an H100's or H200's 132 SMs, by the shape alone, so the sums' order (and so their bits) is
// the same on any GPU.
constexpr int kFilterBlocks = 528;

// The sizes the kernels index with, in 32 bits (conv2d_direct_supports keeps them there).
struct DirectShape {
  int n, c, h, w;  // x
  int k, r, s;     // filters
  int p, q;        // y
  int stride_h, stride_w, pad_h, pad_w;
};

DirectShape shape_of(const Conv2dGeometry& g) {
  return {g.batch,           g.channels,     g.height,      g.width, g.filters,
          g.kernel_h,        g.kernel_w,     g.out_h,       g.out_w, g.params.stride_h,
          g.params.stride_w, g.params.pad_h, g.params.pad_w};
}

// The shared-memory capacity (floats) a kernel instance is compiled with, passed as a tag: the
// smallest of three that holds `floats`, so small convolutions do not reserve a block's 48 KB.
template <int N>
struct Capacity {
  static constexpr int value = N;
};

template <class Launch>
void with_capacity(int floats, Launch&& launch) {
  if (floats <= 2048) return launch(Capacity<2048>{});
  if (floats <= 4096) return launch(Capacity<4096>{});
  return launch(Capacity<12288>{});
}
constexpr int kMaxCapacity = 12288;  // floats: 48 KB, a block's static shared memory

// Positions one thread of the forward or the input gradient computes, kSpanThreads apart, so
// that each load and store of a warp is coalesced (and taps one thread of the filter gradient
// sums); every tap's (or position's) 8 broadcast values then serve 4 x 8 sums.
constexpr int kSpan = 4;

// Whether a forward convolution pads its input (then every tap checks its bounds).
template <bool kPadded>
struct Padding {};

// The filter width a kernel instance is compiled for, so that a row's taps unroll and their loads
// are all in flight before the sums that use them (3 and 5; 0 is any width, looped).
template <int kS>
struct Width {};

template <class Launch>
void with_width(int width, Launch&& launch) {
  if (width == 3) return launch(Width<3>{});
  if (width == 5) return launch(Width<5>{});
  return launch(Width<0>{});
}

// Eight fp32 products value * taps[0..7] added into acc, one fused multiply-add each.
__device__ __forceinline__ void fma8(float (&acc)[kTile], float value, float4 low, float4 high) {
  acc[0] = fmaf(value, low.x, acc[0]);
  acc[1] = fmaf(value, low.y, acc[1]);
  acc[2] = fmaf(value, low.z, acc[2]);
  acc[3] = fmaf(value, low.w, acc[3]);
  acc[4] = fmaf(value, high.x, acc[4]);
  acc[5] = fmaf(value, high.y, acc[5]);
  acc[6] = fmaf(value, high.z, acc[6]);
  acc[7] = fmaf(value, high.w, acc[7]);
}

// The flattened position of the m-th output of a block's thread `lane` (0-127): block by block
// 512 positions, 128 apart within it; past `count` it is the last position (computed, never
// stored).
__device__ __forceinline__ int span_position(int m, int lane, int count) {
  return min(static_cast<int>(blockIdx.x) * kSpanThreads * kSpan + m * kSpanThreads + lane,
             count - 1);
}
__device__ __forceinline__ bool span_stored(int m, int lane, int count) {
  return static_cast<int>(blockIdx.x) * kSpanThreads * kSpan + m * kSpanThreads + lane < count;
}

// Warp groups of a forward block that split its channels (DirectForward::split_channels): each
// group of 128 threads sums the block's 512 positions over a quarter of the channels, for 4x the
// warps of the same work. LeNet's second forward has 287 blocks of 4 warps, 2.2 warps a
// scheduler of a 132-SM GPU, which issued one instruction every 3 cycles (Nsight Compute).
constexpr int kChannelGroups = 4;
// The largest tile capacity (floats) of the split kernel, whose partial sums take 16 KB more.
constexpr int kMaxSplitCapacity = 4096;

// Which filter taps a block stages: the forward's, w[k][c][r][s] as they are; or those of the
// input gradient, computed as a forward over dy padded by R-1-ph rows and S-1-pw columns
// (stride 1): dy's channel k and dx's channel c swap roles and the taps are flipped,
// w[k][c][R-1-r][S-1-s].
template <bool kFlipped>
struct Taps {};

// y[n, k, oh, ow] = b[k] + sum over (c, r, s) of x[n, c, oh*sh - ph + r, ow*sw - pw + s] w[k, c, r,
// s]. A block takes 512 output positions (of the flattened n, oh, ow) and a tile of 8 filters,
// whose C*R*S taps it keeps in shared memory as [tap][8]; a thread sums 4 positions' 8 outputs
// over the taps in (c, r, s) order. For 3- and 5-wide filters a row of taps' x values is loaded
// while the row before it is summed: with 2-3 warps a scheduler (LeNet's second convolution) the
// warps stalled on those loads for most of their cycles (Nsight Compute); loading ahead made the
// kernel about a tenth faster: with its loads in flight it is bound by L1 throughput, each x
// value read once per tap, a warp's loads spanning 3-4 output rows. Staging a block's images in
// shared memory instead (zero-padded, a chunk of channels at a time, the same sums) measured
// slower for LeNet's two convolutions, and no faster for its input gradient, so it was removed.
//
// kGroups > 1 (kChannelGroups): the block's kGroups groups of 128 threads take the same positions
// and each a contiguous share of the channels, group g channels [g C / kGroups, (g + 1) C /
// kGroups); their partial sums are added as p0 + (p1 + (p2 + p3)) through shared memory, a fixed
// order (deterministic, and the same on any GPU), and group 0 stores.
// __launch_bounds__: 512 threads of the split kernel must fit an SM's 64K registers (128 each).
template <class T, int kCapacity, bool kPadded, int kS, bool kFlipped, int kGroups>
__global__ void __launch_bounds__(kSpanThreads* kGroups)
    direct_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                          T* __restrict__ y, DirectShape d, Capacity<kCapacity>, Padding<kPadded>,
                          Width<kS>, Taps<kFlipped>, std::integral_constant<int, kGroups>) {
  __shared__ float4 tile[kCapacity / 4];
  float* const tile_values = reinterpret_cast<float*>(tile);
  const int rs = d.r * d.s;
  const int taps = d.c * rs;
  const int k0 = blockIdx.y * kTile;
  // The tile is read filter by filter, so that a warp's loads are neighbours in w, with
  // kStagedLoads loads of a thread in flight at once: read one at a time, tap by tap, the
  // staging was a large share of the forward's stalls (Nsight Compute).
  constexpr int kStagedLoads = 8;
  const int tile_count = taps * kTile;
  for (int first = threadIdx.x; first < tile_count; first += kStagedLoads * blockDim.x) {
    float values[kStagedLoads];
    int slot[kStagedLoads];
    ALLOY_UNROLL
    for (int u = 0; u < kStagedLoads; ++u) {
      const int i = first + u * static_cast<int>(blockDim.x);
      const int j = i / taps, tap = i - j * taps, k = k0 + j;
      slot[u] = i < tile_count ? tap * kTile + j : -1;
      values[u] = 0.0f;
      if (i < tile_count && k < d.k) {
        if (kFlipped) {
          const int c = tap / rs, flipped = rs - 1 - (tap - c * rs);
          values[u] = widen(w[(c * d.k + k) * rs + flipped]);
        } else {
          values[u] = widen(w[k * taps + tap]);
        }
      }
    }
    ALLOY_UNROLL
    for (int u = 0; u < kStagedLoads; ++u)
      if (slot[u] >= 0) tile_values[slot[u]] = values[u];
  }
  __syncthreads();
  const int plane = d.p * d.q, image = d.h * d.w;
  const int count = d.n * plane;
  const int group = static_cast<int>(threadIdx.x) / kSpanThreads;
  const int lane = static_cast<int>(threadIdx.x) - group * kSpanThreads;
  const int first_channel = group * d.c / kGroups, end_channel = (group + 1) * d.c / kGroups;
  // Per position: its image, its window's corner and, unpadded, the corner's offset in x.
  int source[kSpan], h0[kSpan], w0[kSpan], out[kSpan];
  ALLOY_UNROLL
  for (int m = 0; m < kSpan; ++m) {
    const int position = span_position(m, lane, count);
    const int n = position / plane, pq = position - n * plane;
    const int oh = pq / d.q, ow = pq - oh * d.q;
    h0[m] = oh * d.stride_h - d.pad_h;
    w0[m] = ow * d.stride_w - d.pad_w;
    source[m] = n * d.c * image + (kPadded ? 0 : h0[m] * d.w + w0[m]);
    out[m] = n * d.k * plane + pq;
  }
  // The x value of tap (c, r, s) for position m (zero outside a padded x).
  const auto input = [&](int c, int r, int s, int m) {
    if (!kPadded) return widen(x[source[m] + c * image + r * d.w + s]);
    const int ih = h0[m] + r, iw = w0[m] + s;
    const bool inside = static_cast<unsigned>(ih) < static_cast<unsigned>(d.h) &&
                        static_cast<unsigned>(iw) < static_cast<unsigned>(d.w);
    return inside ? widen(x[source[m] + c * image + ih * d.w + iw]) : 0.0f;
  };
  float acc[kSpan][kTile] = {};
  const float4* taps_at = tile + 2 * first_channel * rs;
  if constexpr (kS > 0) {
    // Two buffers that take turns, so no value is copied (a copy would wait for its load).
    float even[kS][kSpan], odd[kS][kSpan];
    int c = first_channel, r = 0;  // the row whose values load next
    const auto load_row = [&](float(&values)[kS][kSpan]) {
      ALLOY_UNROLL
      for (int s = 0; s < kS; ++s) {
        ALLOY_UNROLL
        for (int m = 0; m < kSpan; ++m)
          values[s][m] = input(c, r, s, m);
      }
      if (++r == d.r) r = 0, ++c;
    };
    const auto sum_row = [&](const float(&values)[kS][kSpan]) {
      ALLOY_UNROLL
      for (int s = 0; s < kS; ++s, taps_at += 2) {
        const float4 low = taps_at[0], high = taps_at[1];
        ALLOY_UNROLL
        for (int m = 0; m < kSpan; ++m)
          fma8(acc[m], values[s][m], low, high);
      }
    };
    const int rows = (end_channel - first_channel) * d.r;
    if (rows > 0) load_row(even);
    for (int row = 0; row < rows; row += 2) {
      if (row + 1 < rows) load_row(odd);
      sum_row(even);
      if (row + 1 == rows) break;
      if (row + 2 < rows) load_row(even);
      sum_row(odd);
    }
  } else {
    for (int c = first_channel; c < end_channel; ++c) {
      for (int r = 0; r < d.r; ++r) {
        for (int s = 0; s < d.s; ++s, taps_at += 2) {
          float value[kSpan];
          ALLOY_UNROLL
          for (int m = 0; m < kSpan; ++m)
            value[m] = input(c, r, s, m);
          const float4 low = taps_at[0], high = taps_at[1];
          ALLOY_UNROLL
          for (int m = 0; m < kSpan; ++m)
            fma8(acc[m], value[m], low, high);
        }
      }
    }
  }
  if constexpr (kGroups > 1) {
    // The last group's sums, then each group before it adding its own in front.
    __shared__ float partial[kSpan * kTile][kSpanThreads];
    for (int from = kGroups - 1; from >= 0; --from) {
      if (group == from) {
        ALLOY_UNROLL
        for (int m = 0; m < kSpan; ++m) {
          ALLOY_UNROLL
          for (int j = 0; j < kTile; ++j) {
            float& slot = partial[m * kTile + j][lane];
            if (from == kGroups - 1) {
              slot = acc[m][j];
            } else if (from > 0) {
              slot = __fadd_rn(acc[m][j], slot);
            } else {
              acc[m][j] = __fadd_rn(acc[m][j], slot);
            }
          }
        }
      }
      __syncthreads();
    }
    if (group != 0) return;
  }
  ALLOY_UNROLL
  for (int m = 0; m < kSpan; ++m) {
    if (!span_stored(m, lane, count)) continue;
    ALLOY_UNROLL
    for (int j = 0; j < kTile; ++j) {
      if (k0 + j >= d.k) continue;
      const float sum = b != nullptr ? __fadd_rn(acc[m][j], widen(b[k0 + j])) : acc[m][j];
      y[out[m] + (k0 + j) * plane] = narrow<T>(sum);
    }
  }
}

// dy padded for the input gradient's forward: padded[n, k, i, j] = dy[n, k, i - rows_before,
// j - columns_before], zero outside dy, with R-1-ph rows and S-1-pw columns on each side.
template <class T>
__global__ void direct_pad_kernel(const T* __restrict__ dy, T* __restrict__ padded, DirectShape d,
                                  int rows_before, int columns_before, IntDivider padded_w,
                                  IntDivider padded_h, unsigned int count) {
  ALLOY_GRID_STRIDE_32(i, count) {
    const IntDivider::QuotientRemainder column = padded_w.divmod(i);
    const IntDivider::QuotientRemainder row = padded_h.divmod(column.quotient);
    const int oh = static_cast<int>(row.remainder) - rows_before;
    const int ow = static_cast<int>(column.remainder) - columns_before;
    const bool inside = static_cast<unsigned>(oh) < static_cast<unsigned>(d.p) &&
                        static_cast<unsigned>(ow) < static_cast<unsigned>(d.q);
    padded[i] =
        inside ? dy[static_cast<int>(row.quotient) * d.p * d.q + oh * d.q + ow] : narrow<T>(0.0f);
  }
}

// Filters with at most this many taps (a 3x3 filter of one channel) take the filter-gradient
// kernel whose threads each hold every tap's 8 sums (72 registers) and split the positions.
constexpr int kSpreadTaps = 9;

// How the filter gradient splits its work: the batch into `chunks` of `images` images and the
// filters into tiles of 8; with few taps (`spread`) a block's threads split the chunk's
// positions, otherwise `group` threads take 4 taps each (past 1024 taps, over several blocks)
// and the block's 256 threads hold `lanes` such groups, which split the positions.
struct FilterSplit {
  int chunks, images;
  int filter_tiles;
  bool spread;
  int group, groups, lanes;
  IntDivider planes, columns;  // by P*Q and by Q: a position's image, and its row
};

FilterSplit filter_split(const Conv2dGeometry& g) {
  FilterSplit split{};
  const int taps = g.channels * g.kernel_h * g.kernel_w;
  split.filter_tiles = (g.filters + kTile - 1) / kTile;
  split.spread = taps <= kSpreadTaps;
  // Otherwise each thread takes 4 taps: a group of up to 256 threads covers 4 times as many.
  split.group = split.spread ? taps : std::min((taps + kSpan - 1) / kSpan, kDirectThreads);
  split.groups = split.spread ? 1 : (taps + split.group * kSpan - 1) / (split.group * kSpan);
  split.lanes = kDirectThreads / split.group;
  // The spread kernel's blocks end in a 72-value reduction: half as many, with more positions.
  const int blocks = split.spread ? kFilterBlocks / 2 : kFilterBlocks;
  const int wanted =
      (blocks + split.filter_tiles * split.groups - 1) / (split.filter_tiles * split.groups);
  const int chunks = std::clamp(wanted, 1, g.batch);
  split.images = (g.batch + chunks - 1) / chunks;
  split.chunks = (g.batch + split.images - 1) / split.images;
  split.planes = IntDivider(static_cast<std::uint32_t>(std::max(g.out_h * g.out_w, 1)));
  split.columns = IntDivider(static_cast<std::uint32_t>(std::max(g.out_w, 1)));
  return split;
}

// One chunk's part of dw[k, tap] = sum over (n, oh, ow) of dy[n, k, oh, ow] x[n, c, oh*sh - ph +
// r, ow*sw - pw + s] for a tile of 8 filters and a group of taps. Per image, the tile's dy is
// staged in shared memory as [position][8]; thread (lane, member) takes the 4 taps member,
// member + group, ... of its block's group and sums the positions lane, lane + lanes, ... in
// order (each position's 8 dy values then serve 32 sums); the lanes of a tap are added in lane
// order, and the chunk's sums written to partials[chunk][k][tap].
template <class T, int kCapacity, bool kPadded>
__global__ void direct_filter_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                     float* __restrict__ partials, DirectShape d, FilterSplit split,
                                     Capacity<kCapacity>, Padding<kPadded>) {
  __shared__ float4 tile[kCapacity / 4];
  float* const tile_values = reinterpret_cast<float*>(tile);
  const int taps = d.c * d.r * d.s;
  const int plane = d.p * d.q, image = d.h * d.w, rs = d.r * d.s;
  const int chunk = blockIdx.x, k0 = blockIdx.y * kTile;
  const int lane = threadIdx.x / split.group, member = threadIdx.x % split.group;
  const int first_tap = blockIdx.z * split.group * kSpan + member;
  int tap_offset[kSpan], tap_r[kSpan], tap_s[kSpan];
  ALLOY_UNROLL
  for (int m = 0; m < kSpan; ++m) {
    const int tap = min(first_tap + m * split.group, taps - 1);  // past the end: computed, unused
    const int c = tap / rs, r = (tap - c * rs) / d.s;
    tap_r[m] = r;
    tap_s[m] = tap - c * rs - r * d.s;
    // Unpadded, every tap is inside x: its offset from the window's corner is all it needs.
    tap_offset[m] = c * image + (kPadded ? 0 : r * d.w + tap_s[m]);
  }
  float acc[kSpan][kTile] = {};
  const int first = chunk * split.images, last = min(d.n, first + split.images);
  for (int n = first; n < last; ++n) {
    __syncthreads();  // the previous image's tile is no longer read
    const T* gradient = dy + (n * d.k + k0) * plane;
    for (int j = 0; j < kTile; ++j) {
      for (int position = threadIdx.x; position < plane; position += blockDim.x)
        tile_values[position * kTile + j] =
            k0 + j < d.k ? widen(gradient[j * plane + position]) : 0.0f;
    }
    __syncthreads();
    if (lane >= split.lanes) continue;
    const int source = n * d.c * image;
    ALLOY_UNROLL_BY(4)
    for (int position = lane; position < plane; position += split.lanes) {
      const IntDivider::QuotientRemainder place = split.columns.divmod(position);
      const float4 low = tile[2 * position], high = tile[2 * position + 1];
      const int h0 = static_cast<int>(place.quotient) * d.stride_h - d.pad_h;
      const int w0 = static_cast<int>(place.remainder) * d.stride_w - d.pad_w;
      const int corner = source + h0 * d.w + w0;
      ALLOY_UNROLL
      for (int m = 0; m < kSpan; ++m) {
        float value;
        if (kPadded) {
          const int ih = h0 + tap_r[m], iw = w0 + tap_s[m];
          const bool inside = static_cast<unsigned>(ih) < static_cast<unsigned>(d.h) &&
                              static_cast<unsigned>(iw) < static_cast<unsigned>(d.w);
          value = inside ? widen(x[source + tap_offset[m] + ih * d.w + iw]) : 0.0f;
        } else {
          value = widen(x[corner + tap_offset[m]]);
        }
        fma8(acc[m], value, low, high);
      }
    }
  }
  // Per tap of the thread, the lanes' sums added in lane order through shared memory.
  ALLOY_UNROLL
  for (int m = 0; m < kSpan; ++m) {
    __syncthreads();
    for (int j = 0; j < kTile; ++j)
      tile_values[j * kDirectThreads + threadIdx.x] = acc[m][j];
    __syncthreads();
    for (int i = threadIdx.x; i < split.group * kTile; i += blockDim.x) {
      const int j = i / split.group, owner = i - j * split.group;
      const int tap = blockIdx.z * split.group * kSpan + m * split.group + owner;
      if (tap >= taps || k0 + j >= d.k) continue;
      float sum = 0.0f;
      for (int l = 0; l < split.lanes; ++l)
        sum += tile_values[j * kDirectThreads + l * split.group + owner];
      partials[(static_cast<std::int64_t>(chunk) * d.k + k0 + j) * taps + tap] = sum;
    }
  }
}

// The same partials for filters of at most kSpreadTaps taps: a thread takes the chunk's
// positions threadIdx.x, + 256, ... and sums dy times x for every tap and the tile's 8 filters
// (72 sums, each position's 8 dy values and its taps' x values loaded once); the block's threads
// are then added in a fixed order, a shuffle tree within each warp, the warps in order.
template <class T>
__global__ void direct_filter_spread_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                            float* __restrict__ partials, DirectShape d,
                                            FilterSplit split) {
  constexpr int kWarps = kDirectThreads / 32;
  __shared__ float sums[kWarps][kSpreadTaps * kTile];
  const int taps = d.c * d.r * d.s;
  const int rs = d.r * d.s, image = d.h * d.w, plane = d.p * d.q;
  const int chunk = blockIdx.x, k0 = blockIdx.y * kTile;
  int tap_offset[kSpreadTaps], tap_r[kSpreadTaps], tap_s[kSpreadTaps];
  ALLOY_UNROLL
  for (int t = 0; t < kSpreadTaps; ++t) {
    const int c = t / rs, r = (t - c * rs) / d.s;
    tap_offset[t] = c * image;
    tap_r[t] = r;
    tap_s[t] = t - c * rs - r * d.s;
  }
  float acc[kSpreadTaps][kTile] = {};
  const int first = chunk * split.images * plane;
  const int last = min(d.n, (chunk + 1) * split.images) * plane;
  for (int position = first + static_cast<int>(threadIdx.x); position < last;
       position += kDirectThreads) {
    const IntDivider::QuotientRemainder image_place = split.planes.divmod(position);
    const int n = static_cast<int>(image_place.quotient),
              pq = static_cast<int>(image_place.remainder);
    const IntDivider::QuotientRemainder place = split.columns.divmod(image_place.remainder);
    const int oh = static_cast<int>(place.quotient), ow = static_cast<int>(place.remainder);
    float gradient[kTile];
    ALLOY_UNROLL
    for (int j = 0; j < kTile; ++j)
      gradient[j] = k0 + j < d.k ? widen(dy[(n * d.k + k0 + j) * plane + pq]) : 0.0f;
    const int h0 = oh * d.stride_h - d.pad_h, w0 = ow * d.stride_w - d.pad_w;
    const int source = n * d.c * image;
    ALLOY_UNROLL
    for (int t = 0; t < kSpreadTaps; ++t) {
      if (t >= taps) continue;
      const int ih = h0 + tap_r[t], iw = w0 + tap_s[t];
      const bool inside = static_cast<unsigned>(ih) < static_cast<unsigned>(d.h) &&
                          static_cast<unsigned>(iw) < static_cast<unsigned>(d.w);
      const float value = inside ? widen(x[source + tap_offset[t] + ih * d.w + iw]) : 0.0f;
      ALLOY_UNROLL
      for (int j = 0; j < kTile; ++j)
        acc[t][j] = fmaf(value, gradient[j], acc[t][j]);
    }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  ALLOY_UNROLL
  for (int t = 0; t < kSpreadTaps; ++t) {
    ALLOY_UNROLL
    for (int j = 0; j < kTile; ++j) {
      float sum = acc[t][j];
      for (int offset = 16; offset > 0; offset /= 2)
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
      if (lane == 0) sums[warp][t * kTile + j] = sum;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < taps * kTile; i += blockDim.x) {
    const int t = i / kTile, j = i - t * kTile;
    if (k0 + j >= d.k) continue;
    float total = 0.0f;
    for (int from = 0; from < kWarps; ++from)
      total += sums[from][i];
    partials[(static_cast<std::int64_t>(chunk) * d.k + k0 + j) * taps + t] = total;
  }
}

bool fits_32_bits(std::int64_t count) {
  return count <= std::numeric_limits<int>::max();
}

}  // namespace

bool conv2d_kernels_take(const Conv2dGeometry& g, DType dtype) {
  if (g.layout != Layout::nchw) return false;
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) return false;
  const std::int64_t x_count = std::int64_t{g.batch} * g.channels * g.height * g.width;
  const std::int64_t y_count = std::int64_t{g.batch} * g.filters * g.out_h * g.out_w;
  return fits_32_bits(x_count) && fits_32_bits(y_count) && x_count > 0 && y_count > 0;
}

bool conv2d_direct_supports(const Conv2dGeometry& g, DType dtype, ConvDirection direction) {
  if (!conv2d_kernels_take(g, dtype)) return false;
  const std::int64_t rs = std::int64_t{g.kernel_h} * g.kernel_w;
  switch (direction) {
    case ConvDirection::forward:
      return g.channels * rs <= kMaxFilterTaps;
    case ConvDirection::data: {
      // dy padded to H+R-1 x W+S-1 (the forward over it needs pad <= R-1, S-1).
      const std::int64_t padded = std::int64_t{g.batch} * g.filters * (g.height + g.kernel_h - 1) *
                                  (g.width + g.kernel_w - 1);
      return g.params.stride_h == 1 && g.params.stride_w == 1 && g.params.pad_h <= g.kernel_h - 1 &&
             g.params.pad_w <= g.kernel_w - 1 && g.filters * rs <= kMaxFilterTaps &&
             fits_32_bits(padded);
    }
    case ConvDirection::filter: {
      const std::int64_t taps = g.channels * rs;
      const std::int64_t partials = std::int64_t{g.filters} * taps * filter_split(g).chunks;
      return taps <= kMaxFilterTaps && std::int64_t{g.out_h} * g.out_w <= kMaxFilterPlane &&
             fits_32_bits(partials);
    }
  }
  return false;
}

bool conv2d_direct_splits(const Conv2dGeometry& g, DType dtype) {
  return conv2d_direct_supports(g, dtype, ConvDirection::forward) && g.channels >= kChannelGroups &&
         g.channels * g.kernel_h * g.kernel_w * kTile <= kMaxSplitCapacity;
}

std::size_t conv2d_direct_data_workspace(const Conv2dGeometry& g, DType dtype) {
  return dtype_size(dtype) * static_cast<std::size_t>(g.batch) * g.filters *
         (g.height + g.kernel_h - 1) * (g.width + g.kernel_w - 1);
}

std::size_t conv2d_direct_filter_workspace(const Conv2dGeometry& g) {
  const std::size_t taps = static_cast<std::size_t>(g.channels) * g.kernel_h * g.kernel_w;
  return sizeof(float) * static_cast<std::size_t>(filter_split(g).chunks) * g.filters * taps;
}

namespace {

// The forward kernel over shape d (the input gradient's padded shape, with flipped taps).
template <bool kFlipped>
void launch_forward(const DirectShape& d, DType dtype, const void* x, const void* w, const void* b,
                    void* y, DirectForward variant, cudaStream_t stream) {
  constexpr int kBlockPositions = kSpanThreads * kSpan;
  const dim3 grid((d.n * d.p * d.q + kBlockPositions - 1) / kBlockPositions,
                  (d.k + kTile - 1) / kTile);
  const bool padded = d.pad_h != 0 || d.pad_w != 0;
  const bool split = variant == DirectForward::split_channels;
  dispatch_floating(dtype, "conv2d_direct_forward", [&](auto type) {
    using T = decltype(type);
    with_capacity(d.c * d.r * d.s * kTile, [&](auto capacity) {
      with_width(d.s, [&](auto width) {
        const auto launch = [&](auto padding, auto groups) {
          ALLOY_LAUNCH(direct_forward_kernel, grid, kSpanThreads * groups.value, 0, stream)
          (static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
           static_cast<T*>(y), d, capacity, padding, width, Taps<kFlipped>{}, groups);
        };
        const auto with_groups = [&](auto padding) {
          using Whole = std::integral_constant<int, 1>;
          using Split = std::integral_constant<int, kChannelGroups>;
          // The split kernel's partial sums need 16 KB beside the tile: only the two smaller
          // capacities (kMaxSplitCapacity) stay within a block's 48 KB.
          if constexpr (!kFlipped && decltype(capacity)::value <= kMaxSplitCapacity) {
            if (split) return launch(padding, Split{});
          }
          launch(padding, Whole{});
        };
        // The input gradient's dy is padded in memory, so its forward never checks bounds.
        if constexpr (kFlipped) {
          with_groups(Padding<false>{});
        } else {
          padded ? with_groups(Padding<true>{}) : with_groups(Padding<false>{});
        }
      });
    });
  });
  ALLOY_CUDA_CHECK_LAUNCH("conv2d direct_forward_kernel over ", d.n, " images of ", d.c,
                          " channels, ", d.k, " filters ", d.r, "x", d.s,
                          kFlipped ? " (input gradient)" : "",
                          split ? " (channels split over warp groups)" : "");
}

}  // namespace

void conv2d_direct_forward(const Conv2dGeometry& g, DType dtype, const void* x, const void* w,
                           const void* b, void* y, cudaStream_t stream, DirectForward variant) {
  ALLOY_CHECK(conv2d_direct_supports(g, dtype, ConvDirection::forward),
              "conv2d_direct_forward: the direct kernels do not take this convolution");
  ALLOY_CHECK(variant == DirectForward::streaming || conv2d_direct_splits(g, dtype),
              "conv2d_direct_forward: the channel-split kernel does not take this convolution");
  launch_forward<false>(shape_of(g), dtype, x, w, b, y, variant, stream);
}

void conv2d_direct_data(const Conv2dGeometry& g, DType dtype, const void* w, const void* dy,
                        void* dx, void* workspace, std::size_t workspace_bytes,
                        cudaStream_t stream) {
  ALLOY_CHECK(conv2d_direct_supports(g, dtype, ConvDirection::data),
              "conv2d_direct_data: the direct kernels do not take this convolution");
  ALLOY_CHECK(workspace_bytes >= conv2d_direct_data_workspace(g, dtype),
              "conv2d_direct_data: a workspace of ", workspace_bytes, " bytes, not the ",
              conv2d_direct_data_workspace(g, dtype), " it needs");
  const DirectShape original = shape_of(g);
  const int rows_before = g.kernel_h - 1 - g.params.pad_h;
  const int columns_before = g.kernel_w - 1 - g.params.pad_w;
  // The forward over padded dy: dy's K channels in, dx's C out, dx's H x W positions.
  const DirectShape d{g.batch,
                      g.filters,
                      g.height + g.kernel_h - 1,
                      g.width + g.kernel_w - 1,
                      g.channels,
                      g.kernel_h,
                      g.kernel_w,
                      g.height,
                      g.width,
                      1,
                      1,
                      0,
                      0};
  const auto count = static_cast<unsigned int>(std::int64_t{d.n} * d.c * d.h * d.w);
  dispatch_floating(dtype, "conv2d_direct_data", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(direct_pad_kernel, grid_for(count), kThreads, 0, stream)
    (static_cast<const T*>(dy), static_cast<T*>(workspace), original, rows_before, columns_before,
     IntDivider(static_cast<std::uint32_t>(d.w)), IntDivider(static_cast<std::uint32_t>(d.h)),
     count);
  });
  ALLOY_CUDA_CHECK_LAUNCH("conv2d direct_pad_kernel over ", count, " values of padded dy");
  launch_forward<true>(d, dtype, workspace, w, nullptr, dx, DirectForward::streaming, stream);
}

void conv2d_direct_filter(const Conv2dGeometry& g, DType dtype, const void* x, const void* dy,
                          void* dw, bool accumulate, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream) {
  ALLOY_CHECK(conv2d_direct_supports(g, dtype, ConvDirection::filter),
              "conv2d_direct_filter: the direct kernels do not take this convolution");
  ALLOY_CHECK(workspace_bytes >= conv2d_direct_filter_workspace(g),
              "conv2d_direct_filter: a workspace of ", workspace_bytes, " bytes, not the ",
              conv2d_direct_filter_workspace(g), " it needs");
  const DirectShape d = shape_of(g);
  const FilterSplit split = filter_split(g);
  const int taps = d.c * d.r * d.s;
  const int count = d.k * taps;
  float* const partials = static_cast<float*>(workspace);
  dispatch_floating(dtype, "conv2d_direct_filter", [&](auto type) {
    using T = decltype(type);
    if (split.spread) {
      ALLOY_LAUNCH(direct_filter_spread_kernel, dim3(split.chunks, split.filter_tiles),
                   kDirectThreads, 0, stream)
      (static_cast<const T*>(x), static_cast<const T*>(dy), partials, d, split);
    } else {
      // The tile holds an image's dy for 8 filters, then the 256 threads' 8 sums.
      with_capacity(std::max(d.p * d.q, kDirectThreads) * kTile, [&](auto capacity) {
        const auto launch = [&](auto padding) {
          ALLOY_LAUNCH(direct_filter_kernel, dim3(split.chunks, split.filter_tiles, split.groups),
                       kDirectThreads, 0, stream)
          (static_cast<const T*>(x), static_cast<const T*>(dy), partials, d, split, capacity,
           padding);
        };
        d.pad_h != 0 || d.pad_w != 0 ? launch(Padding<true>{}) : launch(Padding<false>{});
      });
    }
    ALLOY_CUDA_CHECK_LAUNCH("conv2d direct_filter_kernel over ", split.chunks, " chunks of ",
                            split.images, " images, ", d.k, " filters of ", taps, " taps");
  });
  add_chunk_partials(partials, split.chunks, count, dw, dtype, accumulate, stream);
}

static_assert(kMaxFilterTaps * kTile <= kMaxCapacity, "a filter tile fits the largest capacity");
static_assert(kMaxFilterPlane * kTile <= kMaxCapacity, "an image's dy tile fits it too");

}  // namespace alloy::cuda
