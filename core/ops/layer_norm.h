// Layer normalisation over the last dimension (PyTorch's nn.LayerNorm(D, eps,
// elementwise_affine=True)): x [..., D] is read as rows = numel / D rows of D features.
// Statistics and arithmetic run in fp32 whatever the storage dtype of x; weight and bias are
// [D], f32 or x's dtype; y has x's dtype, dx has dy's dtype.
//
// The floats, per row (sums in fp32; their order is fixed per backend, see below):
//   mean = fl(sum_j x_j / D)
//   var  = fl(sum_j (x_j - mean)^2 / D)                 (biased, two passes)
//   rstd = 1 / sqrtf(var + eps)
//   y_j  = round(((x_j - mean) * rstd) * w_j + b_j)     rounded once to x's dtype
// Backward, with xhat_j = (x_j - mean) * rstd and g_j = dy_j * w_j:
//   a    = fl(sum_j g_j / D),  c = fl(sum_j g_j * xhat_j / D)
//   dx_j = round(rstd * ((g_j - a) - xhat_j * c))       rounded once to dy's dtype
//   dweight_j += sum_rows dy_j * xhat_j,  dbias_j += sum_rows dy_j   (fp32 sums; each
//   parameter gradient rounded once into its dtype)
// Sum orders. CPU: a row's sums run over 16 interleaved fp32 lanes added in lane order; the
// parameter sums run over fixed blocks of rows (block size from the row count alone), each
// block in row order in fp32, the blocks joined in block order in double. So CPU results do
// not depend on the thread count. CUDA: a block per row, fixed tree reductions (block_sum);
// parameter sums by 32-column tiles over row chunks joined in chunk order, and fused
// multiply-adds where nvcc contracts: deterministic run to run, equal to the CPU within fp32
// rounding, not bit for bit.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace alloy {

struct LayerNormSaved {
  Tensor mean;  // f32 [rows]
  Tensor rstd;  // f32 [rows]: 1 / sqrt(biased variance + eps)
};

struct LayerNormResult {
  Tensor y;
  LayerNormSaved saved;  // undefined tensors unless the forward was asked to save them
};

// save_statistics: keep the per-row mean and rstd for backward (an evaluation forward does not).
LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   float eps, bool save_statistics = true);

// The gradient of the forward that produced `saved` from x and weight. Accumulates into dweight
// and dbias ([D], f32 or x's dtype); returns dx in dy's dtype (dy: any floating dtype, x's shape).
Tensor layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const LayerNormSaved& saved, Tensor& dweight, Tensor& dbias);

namespace cpu {

struct LayerNormGeometry {
  std::int64_t rows = 0, features = 0;
};

// y from x (x_dtype storage) with fp32 weight and bias; mean and rstd (f32 [rows]) are written
// unless null.
void layer_norm_forward(const void* x, DType x_dtype, const LayerNormGeometry& geometry,
                        const float* weight, const float* bias, float eps, void* y, float* mean,
                        float* rstd);
// dx (dy_dtype storage) and dweight, dbias (fp32 [features], added to).
void layer_norm_backward(const void* dy, DType dy_dtype, const void* x, DType x_dtype,
                         const LayerNormGeometry& geometry, const float* weight, const float* mean,
                         const float* rstd, void* dx, float* dweight, float* dbias);

}  // namespace cpu

}  // namespace alloy
