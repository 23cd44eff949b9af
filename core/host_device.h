// ALLOY_HOST_DEVICE marks a small inline function that the CPU kernels and the CUDA kernels
// share, so both backends do the same arithmetic by construction (a schedule's rate, the clip
// coefficient). nvcc compiles it for both sides; host compilers, and the CUDA emulator's host
// build of the .cu files, see a plain inline function.
#pragma once

#if defined(__CUDACC__)
#define ALLOY_HOST_DEVICE __host__ __device__
#else
#define ALLOY_HOST_DEVICE
#endif
