// Included (-include) before every .cu file of an emulated build, which the host compiler
// compiles as C++: the CUDA headers' host declarations, then the device builtins (threadIdx,
// __syncthreads, atomics, ...) that nvcc would have provided, and nvcuda::wmma, which CUDA's
// <mma.h> declares for nvcc only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "tools/cuda_emulator/device.h"
#include "tools/cuda_emulator/wmma.h"
