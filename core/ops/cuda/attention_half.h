// The f16 and bf16 kernels of causal self-attention (core/ops/attention.h has the formulas), on
// tensor cores: every product of q, k, v, dy and the probabilities is a 16 x 16 x 16 warp matrix
// product (wmma) with fp32 accumulation; scores, statistics and score gradients are fp32, and
// the probabilities and score gradients are rounded to the half type before their products, as
// flash attention does.
//
// Forward, a block per 64 query rows (a warp per 16): a first pass over the key tiles finds each
// row's max and sum of exp, a second forms p = exp(s - lse) and sums p v. The two passes cost one
// more q k product than an online softmax, but the output accumulates in the tensor cores'
// registers without rescaling, and its probabilities are exactly those backward recomputes.
// Backward (flash attention 2): a block per 64 keys sums dk and dv over the query tiles after
// them; a block per 64 query rows sums dq over their keys. Every output has one writer and a
// fixed summation order: deterministic, no atomics. Head sizes up to 128 (padded to 32, 64 or
// 128 with zeros).
#pragma once

#include <cuda_runtime_api.h>

#include "core/ops/attention.h"

namespace alloy::cuda {

void attention_forward_half(const void* qkv, DType dtype, const AttentionGeometry& g, void* y,
                            float* lse, const AttentionDropoutBits& dropout, cudaStream_t stream);

// delta: f32 [B, H, T], each query row's sum of dy * y.
void attention_backward_half(const void* dy, const void* qkv, const float* lse, const float* delta,
                             DType dtype, const AttentionGeometry& g, void* dqkv,
                             const AttentionDropoutBits& dropout, cudaStream_t stream);

}  // namespace alloy::cuda
