// What nvcc provides to device code (threadIdx, __syncthreads, warp shuffles, atomics, the
// round-to-nearest intrinsics, min/max), for the .cu files that an emulated build compiles as
// C++ after the CUDA headers (prelude.h). The builtins run on the emulator's kernel engine
// (kernel.cpp): the index builtins read the running CUDA thread's coordinates, and the barrier
// and warp builtins suspend its fiber until its block or warp has caught up.
//
// One OS thread runs a grid, one block after another, and a fiber switches only inside a
// barrier or a warp collective: atomics are plain read-modify-writes, fences are empty, and a
// static variable is exactly one block's shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace alloy::emulator {

// The running CUDA thread's coordinates; std::logic_error outside a kernel.
const uint3& current_thread_index();
const uint3& current_block_index();
const dim3& current_block_dim();
const dim3& current_grid_dim();

enum class Barrier { sync, sync_or };  // __syncthreads, __syncthreads_or

// Suspends the thread until every thread of its block waits at a barrier of the same kind;
// returns whether any of them passed a nonzero predicate. DeviceFault when some thread has
// returned or waits elsewhere.
int block_barrier(Barrier barrier, int predicate);

enum class WarpCollective { shuffle_down, shuffle_xor, ballot, sync };

// Suspends the thread until every lane named in `mask` waits at the same collective with the
// same mask. A shuffle returns the `bits` of the lane that `operand` (delta or lane mask) and
// `width` select, or the caller's own where CUDA keeps it; a ballot returns the mask of the
// lanes whose `bits` are nonzero; a sync (__syncwarp) exchanges nothing. DeviceFault for a mask
// that leaves out the caller or names lanes that do not exist, or lanes that returned or wait
// elsewhere.
std::uint64_t warp_collective(WarpCollective collective, unsigned int mask, std::uint64_t bits,
                              unsigned int size, unsigned int operand, int width);

// What a lane posts to a warp task: first the call's arguments that every lane must pass alike
// (compared bit for bit), then, in a type derived from it, the lane's own operands.
struct WarpTaskPart {
  std::uint64_t uniform[4] = {};
};

// A warp-wide operation that the engine runs once for the whole warp, on every lane's part
// (nvcuda::wmma's loads, stores and multiplies, where each lane holds a share of a tile).
struct WarpTask {
  const char* name;  // "wmma::mma_sync", in fault messages
  // The uniform arguments in words ("pointer 0x..., ldm 16"), for a fault naming the lanes
  // that disagree.
  std::string (*describe)(const WarpTaskPart& part);
  // Runs the operation on the 32 lanes' parts, in lane order; std::invalid_argument, whose
  // message the device fault carries, where they break the operation's rules.
  void (*run)(const WarpTaskPart* const* parts);
};

// Suspends the thread until all 32 lanes of its warp have posted a part for `task`, then runs
// the task once. DeviceFault for a warp of fewer than 32 lanes, lanes that returned or wait
// elsewhere, parts whose uniform arguments differ, or a part that `run` refuses.
void warp_task(const WarpTask& task, const WarpTaskPart& part);

namespace detail {

template <class T>
T shuffle(WarpCollective collective, unsigned int mask, T value, unsigned int operand, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(std::uint64_t),
                "a warp shuffle moves at most 8 bytes of plain data");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_collective(collective, mask, bits, sizeof(T), operand, width);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

// Hides a value from the optimizer, so that no multiply and add around a __f*_rn or __d*_rn
// intrinsic are contracted into an FMA (gcc contracts across inlined calls where FMA
// instructions exist), as nvcc never contracts those intrinsics.
template <class T>
T opaque(T value) {
#if defined(__x86_64__)
  asm("" : "+x"(value));
#elif defined(__aarch64__)
  asm("" : "+w"(value));
#else
  asm("" : "+m"(value));
#endif
  return value;
}

// A read-modify-write that returns the old value, as every CUDA atomic does.
template <class T, class Update>
T atomic_update(T* address, Update update) {
  const T old = *address;
  *address = update(old);
  return old;
}

// Keeps a parameter out of template argument deduction: the operand converts to the pointee's
// type, as it does for CUDA's overloads.
template <class T>
struct NonDeduced {
  using type = T;
};

template <class A, class B>
using EnableArithmetic =
    std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>, decltype(A{} + B{})>;

}  // namespace detail
}  // namespace alloy::emulator

#define threadIdx (::alloy::emulator::current_thread_index())
#define blockIdx (::alloy::emulator::current_block_index())
#define blockDim (::alloy::emulator::current_block_dim())
#define gridDim (::alloy::emulator::current_grid_dim())
constexpr int warpSize = 32;

// crt/host_defines.h makes __shared__ an attribute that gcc ignores; blocks run one at a time,
// so a static is one block's shared memory. __device__, __global__ and __forceinline__ keep
// its definitions (ignored attributes, and inline always_inline).
#undef __shared__
#define __shared__ static
// __launch_bounds__ only bounds nvcc's register allocation for a block size; crt/host_defines.h
// makes it an attribute that gcc rejects.
#undef __launch_bounds__
#define __launch_bounds__(...)

inline void __syncthreads() {
  ::alloy::emulator::block_barrier(::alloy::emulator::Barrier::sync, 0);
}
inline int __syncthreads_or(int predicate) {
  return ::alloy::emulator::block_barrier(::alloy::emulator::Barrier::sync_or, predicate);
}
inline void __threadfence() {}

template <class T>
T __shfl_down_sync(unsigned int mask, T value, unsigned int delta, int width = warpSize) {
  return ::alloy::emulator::detail::shuffle(::alloy::emulator::WarpCollective::shuffle_down, mask,
                                            value, delta, width);
}
template <class T>
T __shfl_xor_sync(unsigned int mask, T value, int lane_mask, int width = warpSize) {
  return ::alloy::emulator::detail::shuffle(::alloy::emulator::WarpCollective::shuffle_xor, mask,
                                            value, static_cast<unsigned int>(lane_mask), width);
}
inline unsigned int __ballot_sync(unsigned int mask, int predicate) {
  return static_cast<unsigned int>(::alloy::emulator::warp_collective(
      ::alloy::emulator::WarpCollective::ballot, mask, predicate != 0, sizeof(int), 0, warpSize));
}
// Orders the memory accesses of the lanes in `mask`, as between a wmma store to shared memory
// and other lanes' reads of it.
inline void __syncwarp(unsigned int mask = 0xffffffffu) {
  ::alloy::emulator::warp_collective(::alloy::emulator::WarpCollective::sync, mask, 0, 0, 0,
                                     warpSize);
}

// Loads through L2 or the read-only cache: host memory has neither.
template <class T>
T __ldcg(const T* address) {
  return *address;
}
template <class T>
T __ldg(const T* address) {
  return *address;
}

inline float __fadd_rn(float a, float b) {
  return ::alloy::emulator::detail::opaque(a) + ::alloy::emulator::detail::opaque(b);
}
inline float __fmul_rn(float a, float b) {
  return ::alloy::emulator::detail::opaque(a * b);
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);  // one rounding, as the device's fma.rn.f32
}
inline double __dadd_rn(double a, double b) {
  return ::alloy::emulator::detail::opaque(a) + ::alloy::emulator::detail::opaque(b);
}
inline double __dmul_rn(double a, double b) {
  return ::alloy::emulator::detail::opaque(a * b);
}

// Integer atomics wrap around, as on a GPU (through unsigned arithmetic, where a signed
// overflow is defined).
inline int atomicAdd(int* address, int value) {
  return ::alloy::emulator::detail::atomic_update(address, [value](int old) {
    return static_cast<int>(static_cast<unsigned int>(old) + static_cast<unsigned int>(value));
  });
}
inline unsigned int atomicAdd(unsigned int* address, unsigned int value) {
  return ::alloy::emulator::detail::atomic_update(
      address, [value](unsigned int old) { return old + value; });
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  return ::alloy::emulator::detail::atomic_update(
      address, [value](unsigned long long old) { return old + value; });
}
inline float atomicAdd(float* address, float value) {
  return ::alloy::emulator::detail::atomic_update(address,
                                                  [value](float old) { return old + value; });
}
inline double atomicAdd(double* address, double value) {
  return ::alloy::emulator::detail::atomic_update(address,
                                                  [value](double old) { return old + value; });
}

template <class T>
T atomicExch(T* address, typename ::alloy::emulator::detail::NonDeduced<T>::type value) {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned int> ||
                    std::is_same_v<T, unsigned long long> || std::is_same_v<T, float>,
                "atomicExch takes int, unsigned int, unsigned long long or float");
  return ::alloy::emulator::detail::atomic_update(address, [value](T) { return value; });
}

template <class T>
T atomicMax(T* address, typename ::alloy::emulator::detail::NonDeduced<T>::type value) {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned int> ||
                    std::is_same_v<T, long long> || std::is_same_v<T, unsigned long long>,
                "atomicMax takes int, unsigned int, long long or unsigned long long");
  return ::alloy::emulator::detail::atomic_update(
      address, [value](T old) { return old < value ? value : old; });
}

// ((old >= limit) ? 0 : (old + 1)), CUDA's wrapping increment.
inline unsigned int atomicInc(unsigned int* address, unsigned int limit) {
  return ::alloy::emulator::detail::atomic_update(
      address, [limit](unsigned int old) { return old >= limit ? 0u : old + 1; });
}

template <class T>
T atomicCAS(T* address, typename ::alloy::emulator::detail::NonDeduced<T>::type compare,
            typename ::alloy::emulator::detail::NonDeduced<T>::type value) {
  static_assert(std::is_same_v<T, int> || std::is_same_v<T, unsigned int> ||
                    std::is_same_v<T, unsigned long long>,
                "atomicCAS takes int, unsigned int or unsigned long long");
  return ::alloy::emulator::detail::atomic_update(
      address, [compare, value](T old) { return old == compare ? value : old; });
}

// CUDA's min and max for device code: the operands' usual arithmetic conversions (int and
// unsigned int give unsigned int), and fmin/fmax for floating point, where a NaN loses.
template <class A, class B>
::alloy::emulator::detail::EnableArithmetic<A, B> min(A a, B b) {
  using T = decltype(a + b);
  if constexpr (std::is_floating_point_v<T>) {
    return std::fmin(static_cast<T>(a), static_cast<T>(b));
  } else {
    return static_cast<T>(b) < static_cast<T>(a) ? static_cast<T>(b) : static_cast<T>(a);
  }
}
template <class A, class B>
::alloy::emulator::detail::EnableArithmetic<A, B> max(A a, B b) {
  using T = decltype(a + b);
  if constexpr (std::is_floating_point_v<T>) {
    return std::fmax(static_cast<T>(a), static_cast<T>(b));
  } else {
    return static_cast<T>(a) < static_cast<T>(b) ? static_cast<T>(b) : static_cast<T>(a);
  }
}
