// Whether fp32 GEMMs and convolutions on a CUDA device may run on TF32 tensor cores (--allow-tf32,
// PyTorch's torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 in one):
// cuBLAS then computes fp32 products in CUBLAS_COMPUTE_32F_FAST_TF32 and cuDNN's fp32
// convolutions take CUDNN_TENSOR_OP_MATH. Off by default, so that fp32 (O0) stays IEEE fp32;
// half data runs on tensor cores either way. The CPU backend computes fp32 in fp32 whatever it
// says. Pure host code: the command sets it without the CUDA headers.
#pragma once

namespace alloy {

// The process-wide setting, set before training (apps/train/trainer.cpp) and read when a GEMM is
// issued or a convolution planned; off until set.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace alloy
