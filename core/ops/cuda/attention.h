// Causal self-attention on the GPU (core/ops/attention.h has the formulas). f16 and bf16 run on
// tensor cores (core/ops/cuda/attention_half.h); f32, here, runs flash-attention kernels with
// shared-memory tiles of 32 keys and fp32 arithmetic on the CUDA cores. Forward: a block per 16
// query rows of one head; each warp owns 4 rows, a lane one key of the tile (scores, running
// max and sum by warp shuffles) and D / 32 output columns. Backward: delta = rowsum(dy * y);
// then a block per 32 keys sums dk and dv over the query rows after them, and a block per 8
// query rows sums dq over their keys, each recomputing the probabilities from lse. Every
// output element has one writer and a fixed summation order: deterministic, no atomics.
// Dropout factors are drawn where the probabilities are formed. Head sizes up to 128.
#pragma once

#include <cuda_runtime_api.h>

#include "core/ops/attention.h"

namespace alloy::cuda {

void attention_forward(const void* qkv, DType dtype, const AttentionGeometry& g, void* y,
                       float* lse, const AttentionDropoutBits& dropout, cudaStream_t stream);
void attention_backward(const void* dy, const void* qkv, const void* y, const float* lse,
                        DType dtype, const AttentionGeometry& g, void* dqkv,
                        const AttentionDropoutBits& dropout, cudaStream_t stream);

}  // namespace alloy::cuda
