// Alloy's own GEMM for small products, c[m, n] = op(a)[m, k] op(b)[k, n] (+ bias[n]) (+ c), as
// linear layers with few weights need: LeNet's, a classifier's last layer. There cuBLAS takes
// many times the work's own time: it splits k (hundreds of ways for LeNet's 10x128 weight
// gradient, about a ninth of LeNet's step) and runs two kernels, a split-k GEMM and its
// reduction. Each output's sum runs over k in order, in fp32, and is rounded once (with the bias
// and c's old value added in fp32 first): deterministic on any GPU.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"

namespace alloy::cuda {

struct SmallGemm {
  int m = 0, n = 0, k = 0;
  bool a_transposed = false;  // a stored [k, m], else [m, k]
  bool b_transposed = false;  // b stored [n, k], else [k, n]
};

// Whether small_gemm takes the product: at most 2^18 outputs (LeNet's 800x128 weight gradient
// has 102400; a 1024x4096 layer's is where cuBLAS fills the GPU itself) and k up to 512. Longer
// sums are cuBLAS's: for LeNet's first forward (256 x 128 over 800 inputs) cuBLAS splits k and
// is about twice as fast as one block a tile summing all of k (tools/gpu/gemm_algorithms).
bool small_gemm_fits(int m, int n, int k);

// c = op(a) op(b) (+ bias) (+ c when `accumulate`): a, b and bias (may be null) in `dtype`
// (f32, f16 or bf16), c in `c_dtype` (`dtype`, or f32 for fp32 gradients of half layers).
void small_gemm(const SmallGemm& shape, const void* a, const void* b, DType dtype, const void* bias,
                void* c, DType c_dtype, bool accumulate, cudaStream_t stream);

}  // namespace alloy::cuda
