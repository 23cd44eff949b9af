// Device-side helpers of the multi-tensor launches over a TensorList (multi_tensor.h): which
// tensor and elements a block's thread works on.
#pragma once

#include <cstdint>

#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/multi_tensor.h"

namespace alloy::cuda {

static_assert(kListElementsPerBlock == 4 * kThreads, "four elements per thread");

// This thread's elements of its block's tensor: first, first + stride, ... below count.
struct ListSlice {
  int tensor;
  std::int64_t first, stride, count;
};

// Tensor t owns blocks [block_start[t], block_start[t + 1]). The one block of a list with no
// elements (no tensors, or only empty ones) gets no elements.
template <int Depth>
__device__ __forceinline__ ListSlice slice_of_block(const TensorList<Depth>& list) {
  if (list.size == 0) return {0, 0, 0, 0};
  const auto block = static_cast<std::int32_t>(blockIdx.x);
  int t = 0;
  while (t + 1 < list.size && list.block_start[t + 1] <= block)
    ++t;
  const std::int64_t blocks = list.block_start[t + 1] - list.block_start[t];
  return {t, std::int64_t{block - list.block_start[t]} * blockDim.x + threadIdx.x,
          blocks * blockDim.x, list.count[t]};
}

}  // namespace alloy::cuda
