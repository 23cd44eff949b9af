// Device-side helpers of the multi-tensor launches over a TensorList (multi_tensor.h): how many
// blocks a tensor gets, and which tensor and elements a block's thread works on.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/multi_tensor.h"

namespace alloy::cuda {

// About four elements per thread.
constexpr std::int64_t kListElementsPerBlock = 4 * kThreads;

// The blocks a tensor of `count` elements gets: enough for four elements per thread, at most
// `max_blocks` (a larger tensor's blocks stride over it, so the grid stays within gridDim.x's
// limit and per-block partials or tickets stay few).
inline std::int32_t list_blocks_for(std::int64_t count, std::int64_t max_blocks) {
  return static_cast<std::int32_t>(
      std::min((count + kListElementsPerBlock - 1) / kListElementsPerBlock, max_blocks));
}

// This thread's elements of its block's tensor: first, first + stride, ... below count.
struct ListSlice {
  int tensor;
  std::int64_t first, stride, count;
};

// Tensor t owns blocks [block_start[t], block_start[t + 1]); the list must not be empty.
template <int Depth>
__device__ __forceinline__ ListSlice slice_of_block(const TensorList<Depth>& list) {
  const auto block = static_cast<std::int32_t>(blockIdx.x);
  int t = 0;
  while (t + 1 < list.size && list.block_start[t + 1] <= block)
    ++t;
  const std::int64_t blocks = list.block_start[t + 1] - list.block_start[t];
  return {t, std::int64_t{block - list.block_start[t]} * blockDim.x + threadIdx.x,
          blocks * blockDim.x, list.count[t]};
}

}  // namespace alloy::cuda
