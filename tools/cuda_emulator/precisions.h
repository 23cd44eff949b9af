// What precision the emulated cuBLAS, cuBLASLt and cuDNN were asked to compute fp32 data in, for
// the gpu tests that check a setting reaches the libraries (--allow-tf32): the real libraries
// keep no such record, and the emulator may compute TF32 as plain fp32. Counted per process from
// the calls that run a product (cublasGemmEx, cublasLtMatmul, cudnnConvolution{Forward,
// BackwardData,BackwardFilter}; not the Find calls that time algorithms) since the last reset.
// Tests include it only in an emulated build (ALLOY_CUDA_EMULATOR).
#pragma once

#include <map>

namespace alloy::emulator {

struct Fp32Precisions {
  std::map<int, int> gemm_compute_types;  // cublasComputeType_t -> calls with fp32 A and B
  std::map<int, int> conv_math_types;     // cudnnMathType_t -> calls on fp32 data
};

Fp32Precisions fp32_precisions();
void reset_fp32_precisions();

// Called by the emulated libraries.
void note_fp32_gemm(int compute_type);
void note_fp32_convolution(int math_type);

}  // namespace alloy::emulator
