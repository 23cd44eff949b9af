// Batch normalisation of channels-last (NHWC, physical [N, H, W, C]) tensors on the GPU, with
// the NCHW functions' signatures (batch_norm2d.h: the geometry is still batch, channels and
// plane = H * W) and numerics: fp32 statistics as two-pass moments of pieces of x merged with
// Chan et al.'s update (the NCHW kernel's pieces are its chunks, these a thread's batches of
// rows, read once), the same invstd, running-stat update and gradients
// (batch_norm2d_common.cuh); only the order of the sums differs. The channel is the innermost
// dimension, so a thread owns a group of adjacent channels (one 16-byte vector where C and the
// pointers allow it) and walks rows (n, h, w): no transposes.
#pragma once

#include <cuda_runtime_api.h>

#include "core/ops/cuda/batch_norm2d.h"

namespace alloy::cuda {

void batch_norm2d_nhwc_train_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                                     ChannelData weight, ChannelData bias, ChannelData running_mean,
                                     ChannelData running_var, const BatchNormParams& params,
                                     float* saved_mean, float* saved_invstd, float* scratch,
                                     void* y, cudaStream_t stream);
void batch_norm2d_nhwc_eval_forward(const void* x, DType dtype, const BatchNormGeometry& g,
                                    ChannelData weight, ChannelData bias, ChannelData running_mean,
                                    ChannelData running_var, const BatchNormParams& params,
                                    float* scratch, void* y, cudaStream_t stream);
void batch_norm2d_nhwc_backward(const void* x, DType dtype, const void* dy, DType dy_dtype,
                                ReluMask mask, const BatchNormGeometry& g, ChannelData weight,
                                const float* saved_mean, const float* saved_invstd,
                                ChannelData dweight, ChannelData dbias, float* scratch, void* dx,
                                cudaStream_t stream);

}  // namespace alloy::cuda
