// Shared pieces of the project's CUDA kernels: fp32 loads and stores of f32/f16/bf16 storage
// (rounding with __float2half_rn / __float2bfloat16_rn, bit-exact with core/half.h), a
// dispatch from DType to the storage type, launch sizes and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/dtype.h"

// ALLOY_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...) is
// kernel<<<grid, block, shared_bytes, stream>>>(args...), in a form that an emulated build
// (ALLOY_CUDA=EMULATED, tools/cuda_emulator) can run on the host as well.
#ifdef ALLOY_CUDA_EMULATOR
#include "tools/cuda_emulator/launcher.h"
#define ALLOY_LAUNCH(kernel, grid, block, shared_bytes, stream)           \
  ::alloy::emulator::Launcher(#kernel, grid, block, shared_bytes, stream, \
                              [](auto... arguments) { kernel(arguments...); })
#else
#define ALLOY_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#endif

namespace alloy::cuda {

__device__ __forceinline__ float widen(float value) {
  return value;
}
__device__ __forceinline__ float widen(__half value) {
  return __half2float(value);
}
__device__ __forceinline__ float widen(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

template <class T>
__device__ __forceinline__ T narrow(float value);
template <>
__device__ __forceinline__ float narrow<float>(float value) {
  return value;
}
template <>
__device__ __forceinline__ __half narrow<__half>(float value) {
  return __float2half_rn(value);
}
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}

// Runtime-typed access, for small per-channel tensors whose dtype may be f32 or the input's.
__device__ __forceinline__ float load_any(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::f16:
      return __half2float(static_cast<const __half*>(data)[i]);
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    default:
      return static_cast<const float*>(data)[i];
  }
}

__device__ __forceinline__ void store_any(void* data, DType dtype, std::int64_t i, float value) {
  switch (dtype) {
    case DType::f16:
      static_cast<__half*>(data)[i] = __float2half_rn(value);
      break;
    case DType::bf16:
      static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(value);
      break;
    default:
      static_cast<float*>(data)[i] = value;
      break;
  }
}

// Calls body(T{}) with T the storage type of a floating dtype.
template <class Body>
void dispatch_floating(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case DType::f32:
      return body(float{});
    case DType::f16:
      return body(__half{});
    case DType::bf16:
      return body(__nv_bfloat16{});
    default:
      fail(op, ": no CUDA kernel for dtype ", dtype_name(dtype));
  }
}

// Calls body(A{}, B{}) with A and B the storage types of floating dtypes a and b.
template <class Body>
void dispatch_floating_pair(DType a, DType b, const char* op, Body&& body) {
  dispatch_floating(a, op, [&](auto a_type) {
    dispatch_floating(b, op, [&](auto b_type) { body(a_type, b_type); });
  });
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over `count` elements: enough to fill the device, never more
// than the work.
inline unsigned int grid_for(std::int64_t count) {
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(std::clamp<std::int64_t>(blocks, 1, 1 << 16));
}

#define ALLOY_GRID_STRIDE(i, count)                                                       \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; \
       i < (count); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// Sum of `value` over the block (blockDim.x a multiple of 32, at most 1024); the result is
// valid in thread 0. The combination order is fixed, so results are deterministic.
__device__ __forceinline__ float block_sum(float value) {
  __shared__ float partial[32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  value = threadIdx.x < blockDim.x / 32 ? partial[lane] : 0.0f;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2)
      value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

// The same for a double (the loss mean sums in double, as the CPU does).
__device__ __forceinline__ double block_sum(double value) {
  __shared__ double partial[32];
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  value = threadIdx.x < blockDim.x / 32 ? partial[lane] : 0.0;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2)
      value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  return value;
}

// The ticket of a one-launch grid reduction (core/ops/cuda/last_block.h). Every thread of every
// block calls it once its block's partial results are stored (no thread may have returned);
// it returns true, in every thread, in the block that arrives last, and false elsewhere. That
// block may then read every other block's partials, with __ldcg (through L2, past the
// incoherent L1). The counter is back at zero when the launch ends.
__device__ __forceinline__ bool arrive_last(unsigned int* counter) {
  __shared__ bool last;
  __threadfence();  // release: this thread's partial stores are visible before the ticket
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    const unsigned int blocks = gridDim.x * gridDim.y * gridDim.z;
    last = atomicAdd(counter, 1u) == blocks - 1;
    if (last) {
      atomicExch(counter, 0u);  // every other block has taken its ticket
      __threadfence();          // acquire: the partials are read after the last ticket
    }
  }
  __syncthreads();
  return last;
}

// Maximum over the block with fmaxf's rule (a NaN loses to any number, like the CPU softmax's
// std::fmax), valid in every thread.
__device__ __forceinline__ float block_max(float value) {
  __shared__ float partial[32];
  __shared__ float result;
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_down_sync(0xffffffffu, value, offset));
  }
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) partial[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : -INFINITY;
    for (int offset = 16; offset > 0; offset /= 2) {
      value = fmaxf(value, __shfl_down_sync(0xffffffffu, value, offset));
    }
    if (lane == 0) result = value;
  }
  __syncthreads();
  return result;
}

}  // namespace alloy::cuda
