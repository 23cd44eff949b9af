// What the kernels of attention.cu and attention_half.cu share: where one head's rows live in
// attention's tensors (a block's y index is the (sequence, head) pair), and warp reductions.
#pragma once

#include <cstdint>

#include "core/ops/attention.h"
#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

// Row t of part (0 q, 1 k, 2 v) of qkv at qkv + (b T + t) * 3C + part * C + h D; of a [B, T, C]
// tensor at (b T + t) * C + h D.
struct HeadView {
  std::int64_t b, h, time, dim, width;
  __device__ std::int64_t qkv_at(std::int64_t t, int part) const {
    return (b * time + t) * 3 * width + part * width + h * dim;
  }
  __device__ std::int64_t out_at(std::int64_t t) const { return (b * time + t) * width + h * dim; }
  // part -1: the [B, T, C] tensor.
  __device__ std::int64_t at(std::int64_t t, int part) const {
    return part < 0 ? out_at(t) : qkv_at(t, part);
  }
};

__device__ inline HeadView head_view(const AttentionGeometry& g) {
  const std::int64_t bh = blockIdx.y;
  return {bh / g.heads, bh % g.heads, g.time, g.head_dim, g.heads * g.head_dim};
}

__device__ __forceinline__ float warp_max(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

}  // namespace alloy::cuda
