// Token plus position embedding on the GPU (core/ops/embedding.h has the formulas). Forward: a
// grid-stride map over the output. Backward: each thread owns one channel and walks every
// position in order, adding into the fp32 row sums of the token it meets (one writer per
// element, no atomics), then the sums are added into dwte once; dwpe likewise per (t, c).
#pragma once

#include <cuda_runtime_api.h>

#include "core/ops/embedding.h"

namespace alloy::cuda {

void embedding_forward(const std::int32_t* tokens, const void* wte, const void* wpe, DType dtype,
                       const EmbeddingGeometry& g, void* y, cudaStream_t stream);
void embedding_backward(const void* dy, DType dy_dtype, const std::int32_t* tokens,
                        const EmbeddingGeometry& g, float* sums, void* dwte, DType dwte_dtype,
                        void* dwpe, DType dwpe_dtype, cudaStream_t stream);

}  // namespace alloy::cuda
