// The second pass of a reduction split into chunks whose partial sums were written apart (the
// convolutions' filter gradients, conv2d_direct.h and conv2d_implicit_gemm.h): adding them in
// chunk order keeps the result deterministic and the same on any GPU.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace alloy::cuda {

// out[i] = (accumulate ? out[i] : 0) + partials[0][i] + partials[1][i] + ... in fp32, in chunk
// order, with one rounding to `dtype` (f32, f16 or bf16); partials is [chunks][count].
void add_chunk_partials(const float* partials, int chunks, int count, void* out, DType dtype,
                        bool accumulate, cudaStream_t stream);

}  // namespace alloy::cuda
