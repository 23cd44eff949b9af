// Layer normalisation on the GPU (core/ops/layer_norm.h has the formulas): one block per row
// reduces in fp32 with fixed tree reductions (statistics in two passes, like the CPU twin) and
// writes the row's output or input gradient; the parameter gradients sum over rows in
// 32-column tiles by row chunks, the chunks joined in order by the grid's last block. No float
// atomics: deterministic run to run.
#pragma once

#include <cuda_runtime_api.h>

#include "core/ops/layer_norm.h"

namespace alloy::cuda {

using cpu::LayerNormGeometry;

// A per-feature tensor of f32 or the input's dtype.
struct FeatureData {
  void* data;
  DType dtype;
};

// y in x_dtype; mean and rstd (f32 [rows]) written unless null.
void layer_norm_forward(const void* x, DType x_dtype, const LayerNormGeometry& g,
                        FeatureData weight, FeatureData bias, float eps, void* y, float* mean,
                        float* rstd, cudaStream_t stream);
// dx in dy_dtype; dweight and dbias added to.
void layer_norm_backward(const void* dy, DType dy_dtype, const void* x, DType x_dtype,
                         const LayerNormGeometry& g, FeatureData weight, const float* mean,
                         const float* rstd, void* dx, FeatureData dweight, FeatureData dbias,
                         cudaStream_t stream);

}  // namespace alloy::cuda
