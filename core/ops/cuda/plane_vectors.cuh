// Vector access to NCHW planes for the per-channel kernels (batch norm, the convolution's bias
// gradient): V values of one plane, read or written by one instruction (16 bytes for 8 halves
// or 4 floats) where a 2-byte scalar load would move 64 bytes per warp instruction. A width is
// usable when it divides the plane (a vector never leaves its plane, so it has one channel) and
// every tensor's start is aligned to its vector; otherwise the kernels run with V = 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

template <int V>
using Width = std::integral_constant<int, V>;

// Vector `at` (the element index divided by V) of data, widened to fp32.
template <int V, class T>
__device__ __forceinline__ void load_pack(const T* data, std::int64_t at, float (&out)[V]) {
  const Pack<T, V> pack = reinterpret_cast<const Pack<T, V>*>(data)[at];
  for (int k = 0; k < V; ++k)
    out[k] = widen(pack.v[k]);
}

// The same for data of a floating dtype known at run time.
template <int V>
__device__ __forceinline__ void load_pack_any(const void* data, DType dtype, std::int64_t at,
                                              float (&out)[V]) {
  switch (dtype) {
    case DType::f16:
      return load_pack<V>(static_cast<const __half*>(data), at, out);
    case DType::bf16:
      return load_pack<V>(static_cast<const __nv_bfloat16*>(data), at, out);
    default:
      return load_pack<V>(static_cast<const float*>(data), at, out);
  }
}

// Rounds V fp32 values to T and stores them as vector `at` of data.
template <int V, class T>
__device__ __forceinline__ void store_pack(T* data, std::int64_t at, const float (&in)[V]) {
  Pack<T, V> pack;
  for (int k = 0; k < V; ++k)
    pack.v[k] = narrow<T>(in[k]);
  reinterpret_cast<Pack<T, V>*>(data)[at] = pack;
}

// A tensor a kernel accesses V values at a time: its start (null for an absent one) and its
// element size.
struct PlaneOperand {
  const void* data;
  std::size_t element_bytes;
};

// The widest of 8, 4 and 1 values, at most `widest`, that divides the plane and to whose vector
// size every operand's start is aligned.
inline int plane_vector_width(std::int64_t plane, int widest,
                              std::initializer_list<PlaneOperand> operands) {
  for (const int width : {8, 4}) {
    if (width > widest || plane % width != 0) continue;
    bool aligned = true;
    for (const PlaneOperand& operand : operands) {
      aligned =
          aligned &&
          reinterpret_cast<std::uintptr_t>(operand.data) % (width * operand.element_bytes) == 0;
    }
    if (aligned) return width;
  }
  return 1;
}

// Calls body(Width<V>{}) for width V (8, 4 or 1; 8 only where Widest allows it), so that each
// kernel is compiled only for the widths its data can use.
template <int Widest, class Body>
void dispatch_width(int width, Body&& body) {
  if constexpr (Widest >= 8) {
    if (width == 8) return body(Width<8>{});
  }
  if (width == 4) return body(Width<4>{});
  return body(Width<1>{});
}

}  // namespace alloy::cuda
