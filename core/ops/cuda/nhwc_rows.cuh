// Per-channel kernels over a channels-last tensor seen as [rows, channels] (rows = N * H * W):
// the channel is the innermost dimension, so a thread owns a group of V adjacent channels (one
// 16-byte vector of 8 halves or 4 floats where V divides C and the pointers are aligned,
// plane_vectors.cuh, else V = 1) and walks rows. A block is lanes x row_lanes threads: lanes
// channel groups of one tile of a row (a warp reads whole rows, contiguous memory) times
// row_lanes rows at a time; the grid is (row chunks, tiles). A thread's channels stay fixed, so
// per-channel coefficients are loaded once into registers and no element index is divided.
// Reductions combine a block's row lanes in fp32 in shared memory in a fixed tree and store one
// partial per (chunk, channel); a second, small launch merges each channel's chunks in a fixed
// order (merge_chunk_partials): deterministic, no float atomics, no counters, so the chunks can
// be as many as fill the GPU whatever the channels.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

// Threads of a reduction's block, and blocks of them an SM should hold at once (their
// __launch_bounds__: at most 80 registers a thread), so that enough loads are in flight.
constexpr int kRowReduceThreads = 256;
constexpr int kRowReduceMinBlocks = 3;
// Channels per block of a merge: its threads split each channel's chunks into
// kRowReduceThreads / kMergeChannels runs, so a run is a few chunks long.
constexpr int kMergeChannels = 8;

struct RowSplit {
  std::int64_t rows, channels;
  unsigned int groups;     // V-value vectors per row: channels / V
  unsigned int chunk;      // rows per chunk, a multiple of row_lanes
  unsigned int chunks;     // the grid's x
  unsigned int lanes;      // blockDim.x: channel groups per tile
  unsigned int row_lanes;  // blockDim.y
  unsigned int tiles;      // the grid's y: tiles of lanes channel groups across a row
};

// Tiles of at most 32 groups (a warp spans whole rows of a tile), balanced; blocks of `threads`
// threads; chunks of at least rows_per_thread rows per thread, at most max_chunks of them and
// at most max_blocks blocks in all.
inline RowSplit split_rows(std::int64_t rows, std::int64_t channels, int width, int threads,
                           std::int64_t rows_per_thread, std::int64_t max_chunks,
                           std::int64_t max_blocks, const char* op) {
  constexpr std::int64_t kMaxLanes = 32;
  ALLOY_CHECK(channels > 0 && channels % width == 0, op, ": ", channels, " channels in vectors of ",
              width);
  ALLOY_CHECK(rows < (std::int64_t{1} << 31), op, ": ", rows,
              " rows (N * H * W) are more than one reduction indexes");
  const std::int64_t groups = channels / width;
  const std::int64_t tiles = (groups + kMaxLanes - 1) / kMaxLanes;
  ALLOY_CHECK(tiles <= 65535, op, ": ", channels, " channels do not fit one grid's y dimension");
  const std::int64_t lanes = (groups + tiles - 1) / tiles;
  const std::int64_t row_lanes = threads / lanes;
  const std::int64_t limit =
      std::max<std::int64_t>(std::min(max_chunks, (max_blocks + tiles - 1) / tiles), 1);
  const std::int64_t min_chunk = row_lanes * rows_per_thread;
  const std::int64_t wanted =
      std::clamp<std::int64_t>((rows + min_chunk - 1) / min_chunk, 1, limit);
  const std::int64_t per_chunk = (rows + wanted - 1) / wanted;
  const std::int64_t chunk =
      std::max<std::int64_t>((per_chunk + row_lanes - 1) / row_lanes, 1) * row_lanes;
  const std::int64_t chunks = std::max<std::int64_t>((rows + chunk - 1) / chunk, 1);
  return {rows,
          channels,
          static_cast<unsigned int>(groups),
          static_cast<unsigned int>(chunk),
          static_cast<unsigned int>(chunks),
          static_cast<unsigned int>(lanes),
          static_cast<unsigned int>(row_lanes),
          static_cast<unsigned int>(tiles)};
}

inline dim3 row_grid(const RowSplit& s) {
  return dim3(s.chunks, s.tiles);
}

inline dim3 row_block(const RowSplit& s) {
  return dim3(s.lanes, s.row_lanes);
}

// The rows of chunk `chunk`.
__device__ __forceinline__ unsigned int chunk_rows(const RowSplit& s, unsigned int chunk) {
  const std::int64_t begin = std::int64_t{chunk} * s.chunk;
  const std::int64_t end = begin + s.chunk < s.rows ? begin + s.chunk : s.rows;
  return static_cast<unsigned int>(end - begin);
}

// This thread's channel group: the V channels from group * V.
__device__ __forceinline__ unsigned int row_group() {
  return blockIdx.y * blockDim.x + threadIdx.x;
}

// This thread's vectors (of channel group `group`) in chunk `chunk`, U rows at a time: rows
// threadIdx.y, + blockDim.y, + 2 blockDim.y, ... of the chunk in that order; calls visit(at,
// count) with at[u] the vector index (element index / V) of the next U of them, of which the
// first `count` are in the chunk, the others repeating the last one so that a batch's loads,
// all issued before any value is used, need no guard. Nothing for a group past the row's end.
template <int V, int U, class Visit>
__device__ __forceinline__ void for_row_vectors(const RowSplit& s, unsigned int chunk,
                                                unsigned int group, Visit visit) {
  if (group >= s.groups) return;
  const std::int64_t begin = std::int64_t{chunk} * s.chunk;
  const std::int64_t first = begin + threadIdx.y;
  const std::int64_t end = begin + chunk_rows(s, chunk);
  if (first >= end) return;
  const unsigned int steps = static_cast<unsigned int>((end - first + blockDim.y - 1) / blockDim.y);
  const std::int64_t stride = std::int64_t{blockDim.y} * s.groups;
  std::int64_t at = first * s.groups + group;
  for (unsigned int k = 0; k < steps; k += U) {
    std::int64_t batch[U];
    for (int u = 0; u < U; ++u) {
      batch[u] = at;
      if (k + u + 1 < steps) at += stride;
    }
    visit(batch, min(steps - k, static_cast<unsigned int>(U)));
  }
}

// Sums v over the block's row lanes (threadIdx.y) in a fixed tree, in `buffer` (blockDim.x *
// blockDim.y * V floats of shared memory); every thread gets its lane's totals. Every thread of
// the block calls it.
template <int V>
__device__ __forceinline__ void sum_over_row_lanes(float (&v)[V], float* buffer) {
  const unsigned int lanes = blockDim.x;
  float* own = buffer + (threadIdx.y * lanes + threadIdx.x) * V;
  __syncthreads();  // the buffer may still be read after a previous call
  for (int k = 0; k < V; ++k)
    own[k] = v[k];
  for (unsigned int rows = blockDim.y; rows > 1;) {
    const unsigned int half = (rows + 1) / 2;
    __syncthreads();
    if (threadIdx.y + half < rows) {
      const float* other = own + half * lanes * V;
      for (int k = 0; k < V; ++k)
        own[k] += other[k];
    }
    rows = half;
  }
  __syncthreads();
  const float* total = buffer + threadIdx.x * V;
  for (int k = 0; k < V; ++k)
    v[k] = total[k];
}

// The block of a merge launch (grid: merge_blocks, block: kRowReduceThreads threads): for each
// channel c of the block's kMergeChannels, merges its `chunks` chunks' partials (P floats each,
// at partials[P * (chunk * channels + c)]) in a fixed order and calls finish(c, merged). Each
// channel's chunks are cut into up to kRowReduceThreads / kMergeChannels runs of consecutive
// chunks, one thread each, whose results one thread per channel merges in run order. part(k,
// partial) makes chunk k's State, merge(a, b) the State of a then b; `empty` merged with a state
// gives that state.
template <int P, class State, class Part, class Merge, class Finish>
__device__ __forceinline__ void merge_chunk_partials(const float* partials, std::int64_t channels,
                                                     unsigned int chunks, State empty, Part part,
                                                     Merge merge, Finish finish) {
  constexpr unsigned int kAhead = 8;  // loads in flight per thread
  constexpr unsigned int kRuns = kRowReduceThreads / kMergeChannels;
  __shared__ State runs[kRowReduceThreads];
  const unsigned int per_channel = chunks < kRuns ? chunks : kRuns;
  const unsigned int run = threadIdx.x / kMergeChannels;
  const unsigned int lane = threadIdx.x % kMergeChannels;
  const std::int64_t c = std::int64_t{blockIdx.x} * kMergeChannels + lane;
  State state = empty;
  if (run < per_channel && c < channels) {
    const unsigned int first = static_cast<unsigned int>(std::uint64_t{run} * chunks / per_channel);
    const unsigned int end =
        static_cast<unsigned int>(std::uint64_t{run + 1} * chunks / per_channel);
    for (unsigned int k = first; k < end; k += kAhead) {
      float loaded[kAhead][P];
      for (unsigned int u = 0; u < kAhead; ++u) {
        for (int q = 0; q < P; ++q)
          loaded[u][q] = k + u < end ? partials[P * ((k + u) * channels + c) + q] : 0.0f;
      }
      for (unsigned int u = 0; u < kAhead; ++u) {
        if (k + u < end) state = merge(state, part(k + u, loaded[u]));
      }
    }
  }
  runs[threadIdx.x] = state;
  __syncthreads();
  if (run == 0 && c < channels) {
    State total = empty;
    for (unsigned int r = 0; r < per_channel; ++r)
      total = merge(total, runs[r * kMergeChannels + lane]);
    finish(c, total);
  }
}

inline unsigned int merge_blocks(std::int64_t channels) {
  return static_cast<unsigned int>((channels + kMergeChannels - 1) / kMergeChannels);
}

}  // namespace alloy::cuda
