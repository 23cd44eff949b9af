// Batch normalisation on the GPU with the project's own kernels (cuDNN 9 keeps its batch-norm
// calls only in the deprecated legacy API): blocks per (chunk, channel) reduce in fp32
// (statistics in two passes, like the CPU twin; channel_reduce.cuh), then per-channel kernels
// apply the affine map. Results match the CPU within fp32 reduction-order differences.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/ops/batch_norm2d.h"

namespace alloy::cuda {

using cpu::BatchNormGeometry;
using cpu::ReluMask;

// A per-channel tensor of f32 or the input's dtype.
struct ChannelData {
  void* data;
  DType dtype;
};

// Training forward: saved_mean/saved_invstd (f32 [C]) and y written (with its relu when
// params.relu), running stats updated. scratch: f32 [2C].
void batch_norm2d_train_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                                ChannelData weight, ChannelData bias, ChannelData running_mean,
                                ChannelData running_var, const BatchNormParams& params,
                                float* saved_mean, float* saved_invstd, float* scratch, void* y,
                                cudaStream_t stream);
// Evaluation forward with the running statistics. scratch: f32 [2C].
void batch_norm2d_eval_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                               ChannelData weight, ChannelData bias, ChannelData running_mean,
                               ChannelData running_var, const BatchNormParams& params,
                               float* scratch, void* y, cudaStream_t stream);
// scale = weight / sqrt(running_var + eps), shift = bias - running_mean * scale (f32 [C] each):
// the evaluation forward's affine map, in either layout.
void batch_norm2d_eval_coefficients(std::int64_t channels, ChannelData weight, ChannelData bias,
                                    ChannelData running_mean, ChannelData running_var, float eps,
                                    float* scale, float* shift, cudaStream_t stream);
// dweight += sum dy (x - mean) invstd, dbias += sum dy; dx in x's dtype; dy counts only where
// the mask (if any) is positive. scratch: f32 [2C].
void batch_norm2d_backward(const void* x, DType dtype, const void* dy, DType dy_dtype,
                           ReluMask mask, const BatchNormGeometry& g, ChannelData weight,
                           const float* saved_mean, const float* saved_invstd, ChannelData dweight,
                           ChannelData dbias, float* scratch, void* dx, cudaStream_t stream);

}  // namespace alloy::cuda
