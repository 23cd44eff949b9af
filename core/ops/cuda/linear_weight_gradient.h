// A linear layer's weight gradient, dw[out, in] += dy[batch, out]^T x[batch, in], by Alloy's own
// kernel for layers with few weights. There cuBLAS's choices spend 36-55 us on a few us of work
// (H100: LeNet's 10x128 weights by a split-k of 264 took 55 us a step, a ninth of the step);
// this kernel takes each weight's sum over the batch in order, in fp32, and adds it to dw once:
// deterministic on any GPU. Layers with more weights keep cuBLAS, which fills the GPU there.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace alloy::cuda {

// Whether linear_weight_gradient takes a layer of `in` inputs and `out` outputs.
bool linear_weight_gradient_fits(int in, int out);

// dw += dy^T x: dy [batch, out] and x [batch, in] in `dtype` (f32, f16 or bf16), dw [out, in] in
// `dw_dtype` (an fp32 master gradient or `dtype`), one fp32 addition and one rounding a weight.
void linear_weight_gradient(int batch, int in, int out, const void* dy, const void* x, DType dtype,
                            void* dw, DType dw_dtype, cudaStream_t stream);

}  // namespace alloy::cuda
