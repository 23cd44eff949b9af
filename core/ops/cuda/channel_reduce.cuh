// Per-channel reductions over a [batch, channels, plane] tensor (NCHW with plane = H*W): the
// convolution's bias gradient and batch norm's statistics. A channel's batch*plane values are
// cut into chunks of at least 16 values per thread, one block per (chunk, channel), so that
// many or few channels, small or large planes all fill the device: LeNet's 20 channels of
// 256x26x26 values become 860 blocks, resnet18's 512 channels of 256x4x4 values 512. Threads
// walk their chunk's flat index, so a 4x4 plane keeps every thread busy, where a loop over
// images with the plane inside left most of a block idle. When a channel needs more than one
// chunk, each block stores its partial and the grid's last block (last_block.h) combines every
// channel's partials in chunk order: deterministic, and still one launch.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

struct ChannelSplit {
  std::int64_t batch, channels, plane;
  unsigned int chunk;   // values per chunk (of a channel's batch * plane)
  unsigned int chunks;  // chunks per channel: the grid's x; the channel is its y
};

inline ChannelSplit split_channels(std::int64_t batch, std::int64_t channels, std::int64_t plane,
                                   const char* op) {
  const std::int64_t per_channel = batch * plane;
  ALLOY_CHECK(channels > 0 && channels <= 65535, op, ": ", channels,
              " channels do not fit one grid's y dimension");
  ALLOY_CHECK(per_channel < (std::int64_t{1} << 31), op, ": ", per_channel,
              " values per channel are more than one reduction indexes");
  constexpr std::int64_t kMinChunk = std::int64_t{kThreads} * 16;
  constexpr std::int64_t kMaxChunks = 1024;
  const std::int64_t wanted =
      std::clamp<std::int64_t>((per_channel + kMinChunk - 1) / kMinChunk, 1, kMaxChunks);
  const std::int64_t chunk = std::max<std::int64_t>((per_channel + wanted - 1) / wanted, 1);
  const std::int64_t chunks = std::max<std::int64_t>((per_channel + chunk - 1) / chunk, 1);
  return {batch, channels, plane, static_cast<unsigned int>(chunk),
          static_cast<unsigned int>(chunks)};
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

// The element index of value (n, p) of channel c.
__device__ __forceinline__ std::int64_t channel_at(const ChannelSplit& s, unsigned int n,
                                                   std::int64_t c, unsigned int p) {
  return (static_cast<std::int64_t>(n) * s.channels + c) * s.plane + p;
}

// The sum of f(n, p) over the values (n, p) of chunk `chunk`, by the whole block (blockDim.x
// a multiple of 32); valid in thread 0.
template <class F>
__device__ float chunk_sum(const ChannelSplit& s, unsigned int chunk, F f) {
  const unsigned int plane = static_cast<unsigned int>(s.plane);
  const unsigned int begin = chunk * s.chunk;
  const unsigned int end = begin + chunk_count(s, chunk);
  float sum = 0.0f;
  for (unsigned int j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const unsigned int n = j / plane;
    sum += f(n, j - n * plane);
  }
  return block_sum(sum);
}

}  // namespace alloy::cuda
