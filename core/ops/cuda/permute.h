// CUDA twins of core/ops/permute.h's kernel, and the transposing accumulation the channels-last
// convolution's filter gradient needs (a [K, RS, C] gradient added into a [K, C, RS] one).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace alloy::cuda {

// out[i, c, r] = in[i, r, c] for `images` row-major [rows, cols] matrices of `element_size`-byte
// elements (1, 2 or 4): a bit copy, with both the loads and the stores coalesced. Images with a
// side of at most 32 elements (a filter's [C, R*S] taps) move in slabs of up to 256 long
// indices, across images where they are short; [1, n] and [n, 1] ones are one contiguous copy;
// larger ones go through 32x32 shared-memory tiles.
void transpose_images(const void* in, void* out, std::size_t element_size, std::int64_t images,
                      std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// out[i, c, r] += in[i, r, c], both of the floating `dtype`: one fp32 addition and one rounding
// per element (deterministic: each output element is written by one thread), with the kernel
// chosen by shape as above.
void transpose_images_add(const void* in, void* out, DType dtype, std::int64_t images,
                          std::int64_t rows, std::int64_t cols, cudaStream_t stream);

}  // namespace alloy::cuda
