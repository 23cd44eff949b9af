// Shared pieces of the project's CUDA kernels: fp32 loads and stores of f32/f16/bf16 storage
// (rounding with __float2half_rn / __float2bfloat16_rn, bit-exact with core/half.h), a
// dispatch from DType to the storage type, launch sizes, elementwise maps in 16-byte packs,
// launches in pieces that index in 32 bits, and block reductions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
// nvcuda::wmma, the warp matrix functions, for every kernel. For a host compiler CUDA's <mma.h>
// declares nothing: an emulated build has the emulator's, from its prelude.
#include <mma.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/dtype.h"

// ALLOY_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...) is
// kernel<<<grid, block, shared_bytes, stream>>>(args...), in a form that an emulated build
// (ALLOY_CUDA=EMULATED) can run on the host as well, through the seam of emulated_launch.h.
#ifdef ALLOY_CUDA_EMULATOR
#include "core/cuda/emulated_launch.h"
#define ALLOY_LAUNCH(kernel, grid, block, shared_bytes, stream)             \
  ::alloy::cuda::EmulatedLaunch(#kernel, grid, block, shared_bytes, stream, \
                                [](auto... arguments) { kernel(arguments...); })
#else
#define ALLOY_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  kernel<<<grid, block, shared_bytes, stream>>>
#endif

// `#pragma unroll` for nvcc, where loops over register arrays must unroll to stay in registers;
// nothing for the emulator's host compiler, which does not know the pragma.
// ALLOY_UNROLL_BY(n) unrolls a loop of any trip count n times, so that the loads of n
// iterations can be in flight together.
#ifdef ALLOY_CUDA_EMULATOR
#define ALLOY_UNROLL
#define ALLOY_UNROLL_BY(n)
#else
#define ALLOY_UNROLL _Pragma("unroll")
#define ALLOY_PRAGMA(text) _Pragma(#text)
#define ALLOY_UNROLL_BY(n) ALLOY_PRAGMA(unroll n)
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

// The same in 32 bits, for kernels whose host side keeps `count` below 2^31 (for_each_piece),
// so that the index splits with 32-bit IntDividers and i + stride cannot wrap.
#define ALLOY_GRID_STRIDE_32(i, count)                                      \
  for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < (count); \
       i += blockDim.x * gridDim.x)

// Calls launch(first, units) over consecutive pieces of [0, total) units (planes, rows, images)
// of `unit_elements` elements each, every piece under 2^31 elements: kernels then index in 32
// bits. One piece for any tensor of less than 2^31 elements.
template <class Launch>
void for_each_piece(std::int64_t total, std::int64_t unit_elements, const char* op,
                    Launch&& launch) {
  constexpr std::int64_t kMaxElements = (std::int64_t{1} << 31) - 1;
  ALLOY_CHECK(unit_elements <= kMaxElements, op, ": ", unit_elements,
              " elements in one plane or row are more than a kernel indexes in 32 bits");
  const std::int64_t per_piece = kMaxElements / std::max<std::int64_t>(unit_elements, 1);
  for (std::int64_t first = 0; first < total; first += per_piece)
    launch(first, std::min(per_piece, total - first));
}

// N consecutive elements, moved by one load or store of N * sizeof(T) bytes (ld.global.v4.b32
// for 16) when the address is aligned to that size.
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Elements per pack of a kernel over the storage types T...: 16 bytes of the widest, so one
// access moves 8 half or 4 float elements. A 2-byte access per thread leaves too few bytes in
// flight to reach the memory's bandwidth.
template <class... T>
inline constexpr int kPackSize = static_cast<int>(16 / std::max({sizeof(T)...}));

// Whether every pointer is aligned to its pack of kPackSize<T...> elements (a tensor view may
// start anywhere).
template <class... T>
bool packs_aligned(const T*... pointers) {
  constexpr int n = kPackSize<T...>;
  return ((reinterpret_cast<std::uintptr_t>(pointers) % (sizeof(T) * n) == 0) && ...);
}

// The launch of map_elements over `count` elements: its blocks and whether it moves packs.
struct MapLaunch {
  unsigned int grid;
  bool packed;
};

template <class Out, class... In>
MapLaunch map_launch(std::int64_t count, const Out* out, const In*... in) {
  constexpr int n = kPackSize<Out, In...>;
  if (!packs_aligned(out, in...)) return {grid_for(count), false};
  return {grid_for(std::max(count / n, count % n)), true};
}

template <class F, class Out, class... In, int N>
__device__ __forceinline__ void map_pack(F& f, Pack<Out, N>& y, Pack<In, N>... x) {
  for (int j = 0; j < N; ++j)
    y.v[j] = f(x.v[j]...);
}

// out[i] = f(in[i]...) for every i < count, f taking and returning storage values. `packed`
// (map_launch) moves whole packs, each loaded and stored with one access, and the count % N
// elements after the last pack one by one; else one element at a time. The results are the
// same: only the access width differs. An input may be the output (in place).
template <class F, class Out, class... In>
__device__ __forceinline__ void map_elements(F f, std::int64_t count, bool packed, Out* out,
                                             const In*... in) {
  constexpr int n = kPackSize<Out, In...>;
  std::int64_t first = 0;
  if (packed) {
    ALLOY_GRID_STRIDE(p, count / n) {
      Pack<Out, n> y;
      map_pack(f, y, reinterpret_cast<const Pack<In, n>*>(in)[p]...);
      reinterpret_cast<Pack<Out, n>*>(out)[p] = y;
    }
    first = count / n * n;
  }
  ALLOY_GRID_STRIDE(k, count - first) {
    const std::int64_t i = first + k;
    out[i] = f(in[i]...);
  }
}

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
