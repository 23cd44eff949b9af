// CUDA twin of core/ops/clip_grad_norm.h: one multi-tensor pass per 64 gradients, each block
// summing the squares of its share in double into its partial; the last block of the call's
// last launch combines every partial in a fixed order (core/ops/cuda/last_block.h), so the
// result repeats bit for bit, and writes the norm, the coefficient and the tally. Nothing is
// read on the host: the call can be captured in a CUDA graph (its partials come from the
// caching allocator, inside a capture from the graph's pool).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "core/ops/clip_grad_norm.h"

namespace alloy::cuda {

// Every item has count > 0 (the list may be empty: the norm is then 0). tally and unscale (a
// device f32, read by every block) may be null.
void clip_grad_norm(const std::vector<NormItem>& items, float max_norm, float* norm,
                    float* coefficient, ClipTally* tally, const float* unscale,
                    cudaStream_t stream);

}  // namespace alloy::cuda
