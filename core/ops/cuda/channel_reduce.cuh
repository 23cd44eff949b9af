// Per-channel kernels over a [batch, channels, plane] tensor (NCHW with plane = H*W): the
// convolution's bias gradient, batch norm's statistics and its elementwise maps. A channel's
// batch*plane values are cut into chunks, one block per (chunk, channel), so that many or few
// channels, small or large planes all fill the device: for a reduction, resnet18's 64
// channels of 256x28x28 values become 1024 blocks, LeNet's 6 channels of 256x28x28 values 294,
// its 16 of 256x10x10 112, resnet18's 512 channels of 256x4x4 values 512. Threads walk their
// chunk's flat index (across the images' planes), so a 4x4 plane keeps every thread busy, where a
// loop over images with the plane inside left most of a block idle; the walk advances by additions,
// with no division per value, and moves V values per access (plane_vectors.cuh). When a channel
// needs more than one chunk, a reduction's blocks store their partials and the grid's last block
// (last_block.h) combines every channel's partials in chunk order: deterministic, and still one
// launch.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/plane_vectors.cuh"

namespace alloy::cuda {

struct ChannelSplit {
  std::int64_t batch, channels, plane;
  unsigned int chunk;   // values per chunk (of a channel's batch * plane), a multiple of 8
  unsigned int chunks;  // chunks per channel: the grid's x; the channel is its y
};

// ceil(values / min_chunk) chunks per channel, at most max_chunks, of one size (the last may be
// shorter) rounded up to a multiple of 8 values, so that where V (<= 8) divides the plane, every
// chunk is a whole number of V-value vectors.
inline ChannelSplit split_channels(std::int64_t batch, std::int64_t channels, std::int64_t plane,
                                   std::int64_t min_chunk, std::int64_t max_chunks,
                                   const char* op) {
  const std::int64_t per_channel = batch * plane;
  ALLOY_CHECK(channels > 0 && channels <= 65535, op, ": ", channels,
              " channels do not fit one grid's y dimension");
  ALLOY_CHECK(per_channel < (std::int64_t{1} << 31), op, ": ", per_channel,
              " values per channel are more than one reduction indexes");
  const std::int64_t wanted =
      std::clamp<std::int64_t>((per_channel + min_chunk - 1) / min_chunk, 1, max_chunks);
  const std::int64_t chunk =
      std::max<std::int64_t>((per_channel + wanted - 1) / wanted + 7, 8) / 8 * 8;
  const std::int64_t chunks = std::max<std::int64_t>((per_channel + chunk - 1) / chunk, 1);
  return {batch, channels, plane, static_cast<unsigned int>(chunk),
          static_cast<unsigned int>(chunks)};
}

// For a per-channel reduction: chunks of at least 16 values per thread, and about 1024 blocks
// in all where the channels' values allow it (one or two waves of an H100 or H200, and a short
// merge of each channel's chunks by the last block: 16 steps for 64 channels).
inline ChannelSplit split_for_reduction(std::int64_t batch, std::int64_t channels,
                                        std::int64_t plane, const char* op) {
  constexpr std::int64_t kMinChunk = std::int64_t{kThreads} * 16;
  constexpr std::int64_t kBlocks = 1024;
  return split_channels(batch, channels, plane, kMinChunk,
                        std::max<std::int64_t>((kBlocks + channels - 1) / channels, 1), op);
}

// Vectors per thread per batch of a walk with V-value vectors: 16 values (8 for V = 1), so that
// each thread has 16 to 32 bytes of each tensor's loads in flight at once, in few enough
// registers for three or more blocks of the backward kernels (x, dy and a mask) per SM.
template <int V>
constexpr int kBatch = V == 1 ? 8 : 16 / V;
// The same for a reduction of one tensor: twice the loads in flight, in about the registers.
template <int V>
constexpr int kWideBatch = 2 * kBatch<V>;

// For a per-channel elementwise map: one batch per thread (kBatch<width> vectors) in each block:
// many blocks of few values each, so that the last wave is short.
inline ChannelSplit split_for_map(std::int64_t batch, std::int64_t channels, std::int64_t plane,
                                  int width, const char* op) {
  const std::int64_t per_thread = width == 1 ? kBatch<1> : 16;  // width * kBatch<width>
  return split_channels(batch, channels, plane, kThreads * per_thread, 1 << 20, op);
}

inline dim3 channel_grid(const ChannelSplit& s) {
  return dim3(s.chunks, static_cast<unsigned int>(s.channels));
}

// The number of values in chunk `chunk` of a channel.
__device__ __forceinline__ unsigned int chunk_count(const ChannelSplit& s, unsigned int chunk) {
  const unsigned int per_channel = static_cast<unsigned int>(s.batch * s.plane);
  const unsigned int begin = chunk * s.chunk;
  return min(begin + s.chunk, per_channel) - begin;
}

// This thread's vectors of V values in chunk `chunk` of channel c, U at a time: thread t takes
// the chunk's vectors t, t + blockDim.x, t + 2 blockDim.x, ... in that order and calls
// visit(at, count), with at[u] the tensor index (element index / V) of the next U of them, of which
// the first `count` are in the chunk; the others repeat the last one, so that a batch's loads, all
// issued before its values are used, need no guard. V divides the plane.
template <int V, int U, class Visit>
__device__ __forceinline__ void for_chunk_vectors(const ChannelSplit& s, unsigned int chunk,
                                                  std::int64_t c, Visit visit) {
  const unsigned int plane = static_cast<unsigned int>(s.plane) / V;
  const unsigned int first = chunk * (s.chunk / V) + threadIdx.x;
  const unsigned int end = (chunk * s.chunk + chunk_count(s, chunk)) / V;
  if (first >= end) return;
  const unsigned int steps = (end - first + blockDim.x - 1) / blockDim.x;
  // A step of blockDim.x vectors crosses `step_images` planes and `step_offset` vectors more.
  const std::int64_t image = s.channels * plane;  // vectors from one image's plane to the next's
  const unsigned int step_images = blockDim.x / plane;
  const unsigned int step_offset = blockDim.x - step_images * plane;
  const std::int64_t jump = step_images * image + step_offset;
  const unsigned int n = first / plane;
  unsigned int p = first - n * plane;
  std::int64_t at = (n * s.channels + c) * plane + p;
  for (unsigned int k = 0; k < steps; k += U) {
    std::int64_t batch[U];
    for (int u = 0; u < U; ++u) {
      batch[u] = at;
      if (k + u + 1 < steps) {
        at += jump;
        p += step_offset;
        if (p >= plane) {
          p -= plane;
          at += image - plane;
        }
      }
    }
    visit(batch, min(steps - k, static_cast<unsigned int>(U)));
  }
}

// for_chunk_vectors over one tensor's values: f(value) for each value of this thread's vectors
// in chunk `chunk` of channel c, widened to fp32, in the walk's order (each batch loaded before
// any of its values is used).
template <int V, int U, class T, class F>
__device__ __forceinline__ void for_chunk_values(const T* data, const ChannelSplit& s,
                                                 unsigned int chunk, std::int64_t c, F f) {
  for_chunk_vectors<V, U>(s, chunk, c, [&](const std::int64_t(&at)[U], unsigned int used) {
    float v[U][V];
    for (int u = 0; u < U; ++u)
      load_pack<V>(data, at[u], v[u]);
    for (unsigned int u = 0; u < used; ++u) {
      for (int k = 0; k < V; ++k)
        f(v[u][k]);
    }
  });
}

// For the grid's last block: calls merge(k, partial) for k = 0 .. gridDim.x - 1 in order, with
// chunk k's P partials of `channel` (stored at partials[P * (channel * gridDim.x + k)]), loaded
// eight chunks at a time so that the loads overlap.
template <int P, class Merge>
__device__ __forceinline__ void for_channel_partials(const float* partials, std::int64_t channel,
                                                     Merge merge) {
  constexpr unsigned int kAhead = 8;
  const float* own = partials + P * channel * gridDim.x;
  for (unsigned int k = 0; k < gridDim.x; k += kAhead) {
    float loaded[kAhead][P];
    for (unsigned int u = 0; u < kAhead; ++u) {
      for (int q = 0; q < P; ++q)
        loaded[u][q] = k + u < gridDim.x ? __ldcg(own + P * (k + u) + q) : 0.0f;
    }
    for (unsigned int u = 0; u < kAhead && k + u < gridDim.x; ++u)
      merge(k + u, loaded[u]);
  }
}

}  // namespace alloy::cuda
