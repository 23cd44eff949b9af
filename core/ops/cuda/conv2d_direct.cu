#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/conv2d_direct.h"

namespace alloy::cuda {

namespace {

using cpu::Conv2dGeometry;

constexpr int kTile = 8;  // outputs a thread computes: filters, or input channels for dx
constexpr int kDirectThreads = 256;
constexpr int kMaxFilterTaps = 1536;   // C*R*S (forward, filter) or K*R*S (data) of a tile
constexpr int kMaxFilterPlane = 1536;  // output positions of one image (filter gradient)
// Blocks the filter gradient aims for: the batch is cut into enough chunks to fill a GPU, by
// the shape alone, so the sums' order (and so their bits) is the same on any GPU.
constexpr int kFilterBlocks = 264;

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
struct Capacity {};

template <class Launch>
void with_capacity(int floats, Launch&& launch) {
  if (floats <= 2048) return launch(Capacity<2048>{});
  if (floats <= 4096) return launch(Capacity<4096>{});
  return launch(Capacity<12288>{});
}
constexpr int kMaxCapacity = 12288;  // floats: 48 KB, a block's static shared memory

// Eight fp32 products added into acc, one fused multiply-add each, in order.
__device__ __forceinline__ void fma8(float (&acc)[kTile], float value, const float4* taps) {
  const float4 low = taps[0], high = taps[1];
  acc[0] = fmaf(value, low.x, acc[0]);
  acc[1] = fmaf(value, low.y, acc[1]);
  acc[2] = fmaf(value, low.z, acc[2]);
  acc[3] = fmaf(value, low.w, acc[3]);
  acc[4] = fmaf(value, high.x, acc[4]);
  acc[5] = fmaf(value, high.y, acc[5]);
  acc[6] = fmaf(value, high.z, acc[6]);
  acc[7] = fmaf(value, high.w, acc[7]);
}

// y[n, k, oh, ow] = b[k] + sum over (c, r, s) of x[n, c, oh*sh - ph + r, ow*sw - pw + s] w[k, c, r,
// s]. A block takes 256 output positions (of the flattened n, oh, ow) and a tile of 8 filters,
// whose C*R*S taps it keeps in shared memory as [tap][8]; a thread sums its position's 8 outputs
// over the taps in (c, r, s) order, each input value read once for the 8.
template <class T, int kCapacity>
__global__ void direct_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                      const T* __restrict__ b, T* __restrict__ y, DirectShape d,
                                      Capacity<kCapacity>) {
  __shared__ float4 tile[kCapacity / 4];
  float* const tile_values = reinterpret_cast<float*>(tile);
  const int taps = d.c * d.r * d.s;
  const int k0 = blockIdx.y * kTile;
  for (int i = threadIdx.x; i < taps * kTile; i += blockDim.x) {
    const int tap = i / kTile, k = k0 + i % kTile;
    tile_values[i] = k < d.k ? widen(w[k * taps + tap]) : 0.0f;
  }
  __syncthreads();
  const int plane = d.p * d.q;
  const int position = blockIdx.x * blockDim.x + threadIdx.x;
  if (position >= d.n * plane) return;
  const int n = position / plane, pq = position - n * plane;
  const int oh = pq / d.q, ow = pq - oh * d.q;
  const int h0 = oh * d.stride_h - d.pad_h, w0 = ow * d.stride_w - d.pad_w;
  const T* channel = x + n * d.c * d.h * d.w;
  float acc[kTile] = {};
  const float4* taps_at = tile;
  for (int c = 0; c < d.c; ++c, channel += d.h * d.w) {
    for (int r = 0; r < d.r; ++r) {
      const int ih = h0 + r;
      if (ih < 0 || ih >= d.h) {
        taps_at += 2 * d.s;
        continue;
      }
      const T* row = channel + ih * d.w;
      for (int s = 0; s < d.s; ++s, taps_at += 2) {
        const int iw = w0 + s;
        if (iw >= 0 && iw < d.w) fma8(acc, widen(row[iw]), taps_at);
      }
    }
  }
  T* out = y + (n * d.k + k0) * plane + pq;
  for (int j = 0; j < kTile && k0 + j < d.k; ++j, out += plane)
    *out = narrow<T>(b != nullptr ? __fadd_rn(acc[j], widen(b[k0 + j])) : acc[j]);
}

// dx[n, c, h, w] = sum over (k, r, s) of dy[n, k, h + ph - r, w + pw - s] w[k, c, r, s] (stride
// 1): the forward's pattern with the roles of x and y swapped, a block's tile of 8 input channels
// kept as [k][r][s][8], a thread summing its input position's 8 values in (k, r, s) order.
template <class T, int kCapacity>
__global__ void direct_data_kernel(const T* __restrict__ w, const T* __restrict__ dy,
                                   T* __restrict__ dx, DirectShape d, Capacity<kCapacity>) {
  __shared__ float4 tile[kCapacity / 4];
  float* const tile_values = reinterpret_cast<float*>(tile);
  const int rs = d.r * d.s;
  const int taps = d.k * rs;
  const int c0 = blockIdx.y * kTile;
  for (int i = threadIdx.x; i < taps * kTile; i += blockDim.x) {
    const int tap = i / kTile, c = c0 + i % kTile;
    const int k = tap / rs, offset = tap - k * rs;
    tile_values[i] = c < d.c ? widen(w[(k * d.c + c) * rs + offset]) : 0.0f;
  }
  __syncthreads();
  const int plane = d.h * d.w;
  const int position = blockIdx.x * blockDim.x + threadIdx.x;
  if (position >= d.n * plane) return;
  const int n = position / plane, hw = position - n * plane;
  const int ih = hw / d.w, iw = hw - ih * d.w;
  const int out_plane = d.p * d.q;
  const T* gradient = dy + n * d.k * out_plane;
  float acc[kTile] = {};
  const float4* taps_at = tile;
  for (int k = 0; k < d.k; ++k, gradient += out_plane) {
    for (int r = 0; r < d.r; ++r) {
      const int oh = ih + d.pad_h - r;
      if (oh < 0 || oh >= d.p) {
        taps_at += 2 * d.s;
        continue;
      }
      const T* row = gradient + oh * d.q;
      for (int s = 0; s < d.s; ++s, taps_at += 2) {
        const int ow = iw + d.pad_w - s;
        if (ow >= 0 && ow < d.q) fma8(acc, widen(row[ow]), taps_at);
      }
    }
  }
  T* out = dx + (n * d.c + c0) * plane + hw;
  for (int j = 0; j < kTile && c0 + j < d.c; ++j, out += plane)
    *out = narrow<T>(acc[j]);
}

// How the filter gradient splits its work: the batch into `chunks` of `images` images, the
// filters into tiles of 8, the taps (c, r, s) into groups of `group` with `lanes` threads per tap
// (taps past 256 take one thread each, over several blocks; fewer share a block's 256 threads
// out by positions).
struct FilterSplit {
  int chunks, images;
  int filter_tiles;
  int group, groups, lanes;
};

FilterSplit filter_split(const Conv2dGeometry& g) {
  FilterSplit split{};
  const int taps = g.channels * g.kernel_h * g.kernel_w;
  split.filter_tiles = (g.filters + kTile - 1) / kTile;
  split.group = std::min(taps, kDirectThreads);
  split.groups = (taps + split.group - 1) / split.group;
  split.lanes = kDirectThreads / split.group;
  const int wanted =
      (kFilterBlocks + split.filter_tiles * split.groups - 1) / (split.filter_tiles * split.groups);
  const int chunks = std::clamp(wanted, 1, g.batch);
  split.images = (g.batch + chunks - 1) / chunks;
  split.chunks = (g.batch + split.images - 1) / split.images;
  return split;
}

// One chunk's part of dw[k, tap] = sum over (n, oh, ow) of dy[n, k, oh, ow] x[n, c, oh*sh - ph +
// r, ow*sw - pw + s] for a tile of 8 filters and a group of taps. Per image, the tile's dy is
// staged in shared memory as [position][8]; thread (lane, tap) sums the positions lane, lane +
// lanes, ... in order; the lanes of a tap are then added in lane order, and the chunk's sums
// written to partials[chunk][k][tap].
template <class T, int kCapacity>
__global__ void direct_filter_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                                     float* __restrict__ partials, DirectShape d, FilterSplit split,
                                     Capacity<kCapacity>) {
  __shared__ float4 tile[kCapacity / 4];
  float* const tile_values = reinterpret_cast<float*>(tile);
  const int taps = d.c * d.r * d.s;
  const int plane = d.p * d.q;
  const int chunk = blockIdx.x, k0 = blockIdx.y * kTile;
  const int lane = threadIdx.x / split.group;
  const int tap = blockIdx.z * split.group + threadIdx.x % split.group;
  const bool active = lane < split.lanes && tap < taps;
  const int rs = d.r * d.s;
  const int c = tap / rs, r = (tap - c * rs) / d.s, s = tap - c * rs - r * d.s;
  float acc[kTile] = {};
  const int first = chunk * split.images, last = std::min(d.n, first + split.images);
  for (int n = first; n < last; ++n) {
    __syncthreads();  // the previous image's tile is no longer read
    const T* gradient = dy + (n * d.k + k0) * plane;
    for (int i = threadIdx.x; i < plane * kTile; i += blockDim.x) {
      const int j = i / plane, position = i - j * plane;
      tile_values[position * kTile + j] =
          k0 + j < d.k ? widen(gradient[j * plane + position]) : 0.0f;
    }
    __syncthreads();
    if (!active) continue;
    const T* channel = x + (n * d.c + c) * d.h * d.w;
    int oh = lane / d.q, ow = lane - oh * d.q;
    for (int position = lane; position < plane; position += split.lanes) {
      const int ih = oh * d.stride_h - d.pad_h + r, iw = ow * d.stride_w - d.pad_w + s;
      if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w)
        fma8(acc, widen(channel[ih * d.w + iw]), tile + 2 * position);
      for (ow += split.lanes; ow >= d.q; ow -= d.q)
        ++oh;
    }
  }
  // The lanes' sums of each tap, added in lane order through shared memory.
  __syncthreads();
  for (int j = 0; j < kTile; ++j)
    tile_values[j * kDirectThreads + threadIdx.x] = acc[j];
  __syncthreads();
  for (int i = threadIdx.x; i < split.group * kTile; i += blockDim.x) {
    const int j = i / split.group, member = i - j * split.group;
    const int out_tap = blockIdx.z * split.group + member;
    if (out_tap >= taps || k0 + j >= d.k) continue;
    float sum = 0.0f;
    for (int l = 0; l < split.lanes; ++l)
      sum += tile_values[j * kDirectThreads + l * split.group + member];
    partials[(static_cast<std::int64_t>(chunk) * d.k + k0 + j) * taps + out_tap] = sum;
  }
}

// dw[i] = (accumulate ? dw[i] : 0) + the chunks' partials of i, added in chunk order.
template <class T>
__global__ void direct_filter_sum_kernel(const float* __restrict__ partials, int chunks, int count,
                                         T* dw, bool accumulate) {
  ALLOY_GRID_STRIDE_32(i, static_cast<unsigned int>(count)) {
    float sum = 0.0f;
    for (int chunk = 0; chunk < chunks; ++chunk)
      sum += partials[static_cast<std::int64_t>(chunk) * count + i];
    dw[i] = narrow<T>(accumulate ? __fadd_rn(widen(dw[i]), sum) : sum);
  }
}

bool fits_32_bits(std::int64_t count) {
  return count <= std::numeric_limits<int>::max();
}

}  // namespace

bool conv2d_direct_supports(const Conv2dGeometry& g, DType dtype, ConvDirection direction) {
  if (g.layout != Layout::nchw) return false;
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) return false;
  const std::int64_t x_count = std::int64_t{g.batch} * g.channels * g.height * g.width;
  const std::int64_t y_count = std::int64_t{g.batch} * g.filters * g.out_h * g.out_w;
  if (!fits_32_bits(x_count) || !fits_32_bits(y_count) || x_count == 0 || y_count == 0)
    return false;
  const std::int64_t rs = std::int64_t{g.kernel_h} * g.kernel_w;
  switch (direction) {
    case ConvDirection::forward:
      return g.channels * rs <= kMaxFilterTaps;
    case ConvDirection::data:
      return g.params.stride_h == 1 && g.params.stride_w == 1 && g.filters * rs <= kMaxFilterTaps;
    case ConvDirection::filter: {
      const std::int64_t taps = g.channels * rs;
      const std::int64_t partials = std::int64_t{g.filters} * taps * filter_split(g).chunks;
      return taps <= kMaxFilterTaps && std::int64_t{g.out_h} * g.out_w <= kMaxFilterPlane &&
             fits_32_bits(partials);
    }
  }
  return false;
}

std::size_t conv2d_direct_filter_workspace(const Conv2dGeometry& g) {
  const std::size_t taps = static_cast<std::size_t>(g.channels) * g.kernel_h * g.kernel_w;
  return sizeof(float) * static_cast<std::size_t>(filter_split(g).chunks) * g.filters * taps;
}

void conv2d_direct_forward(const Conv2dGeometry& g, DType dtype, const void* x, const void* w,
                           const void* b, void* y, cudaStream_t stream) {
  ALLOY_CHECK(conv2d_direct_supports(g, dtype, ConvDirection::forward),
              "conv2d_direct_forward: the direct kernels do not take this convolution");
  const DirectShape d = shape_of(g);
  const dim3 grid((d.n * d.p * d.q + kDirectThreads - 1) / kDirectThreads,
                  (d.k + kTile - 1) / kTile);
  dispatch_floating(dtype, "conv2d_direct_forward", [&](auto type) {
    using T = decltype(type);
    with_capacity(d.c * d.r * d.s * kTile, [&](auto capacity) {
      ALLOY_LAUNCH(direct_forward_kernel, grid, kDirectThreads, 0, stream)
      (static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
       static_cast<T*>(y), d, capacity);
    });
  });
  ALLOY_CUDA_CHECK_LAUNCH("conv2d direct_forward_kernel over ", d.n, " images of ", d.c,
                          " channels, ", d.k, " filters ", d.r, "x", d.s);
}

void conv2d_direct_data(const Conv2dGeometry& g, DType dtype, const void* w, const void* dy,
                        void* dx, cudaStream_t stream) {
  ALLOY_CHECK(conv2d_direct_supports(g, dtype, ConvDirection::data),
              "conv2d_direct_data: the direct kernels do not take this convolution");
  const DirectShape d = shape_of(g);
  const dim3 grid((d.n * d.h * d.w + kDirectThreads - 1) / kDirectThreads,
                  (d.c + kTile - 1) / kTile);
  dispatch_floating(dtype, "conv2d_direct_data", [&](auto type) {
    using T = decltype(type);
    with_capacity(d.k * d.r * d.s * kTile, [&](auto capacity) {
      ALLOY_LAUNCH(direct_data_kernel, grid, kDirectThreads, 0, stream)
      (static_cast<const T*>(w), static_cast<const T*>(dy), static_cast<T*>(dx), d, capacity);
    });
  });
  ALLOY_CUDA_CHECK_LAUNCH("conv2d direct_data_kernel over ", d.n, " images of ", d.c, " channels, ",
                          d.k, " filters ", d.r, "x", d.s);
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
    // The tile holds an image's dy for 8 filters, then the 256 threads' 8 sums.
    with_capacity(std::max(d.p * d.q, kDirectThreads) * kTile, [&](auto capacity) {
      ALLOY_LAUNCH(direct_filter_kernel, dim3(split.chunks, split.filter_tiles, split.groups),
                   kDirectThreads, 0, stream)
      (static_cast<const T*>(x), static_cast<const T*>(dy), partials, d, split, capacity);
    });
    ALLOY_CUDA_CHECK_LAUNCH("conv2d direct_filter_kernel over ", split.chunks, " chunks of ",
                            split.images, " images, ", d.k, " filters of ", taps, " taps");
    ALLOY_LAUNCH(direct_filter_sum_kernel, grid_for(count), kThreads, 0, stream)
    (partials, split.chunks, count, static_cast<T*>(dw), accumulate);
    ALLOY_CUDA_CHECK_LAUNCH("conv2d direct_filter_sum_kernel over ", count, " weights of ",
                            split.chunks, " chunks");
  });
}

static_assert(kMaxFilterTaps * kTile <= kMaxCapacity, "a filter tile fits the largest capacity");
static_assert(kMaxFilterPlane * kTile <= kMaxCapacity, "an image's dy tile fits it too");

}  // namespace alloy::cuda
