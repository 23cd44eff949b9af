// nvcuda::wmma, CUDA's warp matrix functions (<mma.h>), for the .cu files that an emulated build
// compiles as C++ (CUDA's <mma.h> declares nothing for a host compiler). The names and
// signatures are CUDA's, for the shape m16n16k16: __half and __nv_bfloat16 matrix_a and matrix_b
// fragments, row or column major, and float or __half accumulators.
//
// Each lane's x[] holds its share of the 16x16 tile, as many elements as on a GPU (16 for
// __half operands, each tile element in two lanes; 8 otherwise), in an order that CUDA leaves
// unspecified and the emulator scrambles differently for each use (wmma.cpp), so that code
// which does anything but uniform work on x[] (fill, scale, convert) gets wrong results here
// too. A fragment starts out as 0xFF bytes, a NaN, as device memory does.
//
// The loads, stores and mma_sync are warp tasks (device.h): every lane of the warp must reach
// the same call with the same pointer, ldm and layout, and the engine runs it once for the
// warp. fill_fragment is lane-local, as CUDA's is.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <cstring>
#include <type_traits>

#include "tools/cuda_emulator/device.h"

namespace alloy::emulator::wmma {

enum class Use : unsigned char { matrix_a, matrix_b, accumulator };
enum class Order : unsigned char { row_major, col_major };

// A fragment's template arguments; `order`: the Layout of a matrix_a or matrix_b (row_major
// for an accumulator, which has none).
struct FragmentType {
  Use use;
  cudaDataType_t element;  // CUDA_R_16F, CUDA_R_16BF or CUDA_R_32F
  Order order;
};

// The elements of one lane's x[], as in CUDA's <mma.h>.
constexpr int lane_elements(Use use, cudaDataType_t element) {
  return use != Use::accumulator && element == CUDA_R_16F ? 16 : 8;
}

// The warp tasks behind load_matrix_sync, store_matrix_sync and mma_sync (wmma.cpp); `x` is
// the calling lane's fragment, `order` the memory's.
void load(FragmentType type, void* x, const void* pointer, unsigned int ldm, Order order);
void store(FragmentType type, void* pointer, const void* x, unsigned int ldm, Order order);
void mma(FragmentType d_type, void* d, FragmentType a_type, const void* a, FragmentType b_type,
         const void* b, FragmentType c_type, const void* c);

template <class T, int size>
struct FragmentBase {
  enum { num_elements = size, num_storage_elements = size };
  using element_type = T;
  using storage_element_type = T;

  FragmentBase() { std::memset(static_cast<void*>(x), 0xff, sizeof x); }

  T x[size];
};

template <class T>
constexpr cudaDataType_t element_of() {
  static_assert(
      std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, float>,
      "the emulator's wmma fragments hold __half, __nv_bfloat16 or float");
  if constexpr (std::is_same_v<T, __half>) {
    return CUDA_R_16F;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return CUDA_R_16BF;
  } else {
    return CUDA_R_32F;
  }
}

}  // namespace alloy::emulator::wmma

namespace nvcuda::wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;

enum layout_t { mem_row_major, mem_col_major };

template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment;

}  // namespace nvcuda::wmma

namespace alloy::emulator::wmma {

template <class Tag>
constexpr Use use_of() {
  if constexpr (std::is_same_v<Tag, nvcuda::wmma::matrix_a>) {
    return Use::matrix_a;
  } else if constexpr (std::is_same_v<Tag, nvcuda::wmma::matrix_b>) {
    return Use::matrix_b;
  } else {
    return Use::accumulator;
  }
}

template <class Tag, class T, class Layout>
constexpr FragmentType type_of(const nvcuda::wmma::fragment<Tag, 16, 16, 16, T, Layout>&) {
  return {use_of<Tag>(), element_of<T>(),
          std::is_same_v<Layout, nvcuda::wmma::col_major> ? Order::col_major : Order::row_major};
}

// The base of a fragment of `Tag` and `T`: a lane's share of the tile.
template <class Tag, class T>
using LaneShare = FragmentBase<T, lane_elements(use_of<Tag>(), element_of<T>())>;

constexpr Order order_of(nvcuda::wmma::layout_t layout) {
  return layout == nvcuda::wmma::mem_col_major ? Order::col_major : Order::row_major;
}

}  // namespace alloy::emulator::wmma

namespace nvcuda::wmma {

#define ALLOY_WMMA_FRAGMENT(use, type, layout)  \
  template <>                                   \
  class fragment<use, 16, 16, 16, type, layout> \
      : public ::alloy::emulator::wmma::LaneShare<use, type> {}
ALLOY_WMMA_FRAGMENT(matrix_a, __half, row_major);
ALLOY_WMMA_FRAGMENT(matrix_a, __half, col_major);
ALLOY_WMMA_FRAGMENT(matrix_b, __half, row_major);
ALLOY_WMMA_FRAGMENT(matrix_b, __half, col_major);
ALLOY_WMMA_FRAGMENT(matrix_a, __nv_bfloat16, row_major);
ALLOY_WMMA_FRAGMENT(matrix_a, __nv_bfloat16, col_major);
ALLOY_WMMA_FRAGMENT(matrix_b, __nv_bfloat16, row_major);
ALLOY_WMMA_FRAGMENT(matrix_b, __nv_bfloat16, col_major);
ALLOY_WMMA_FRAGMENT(accumulator, float, void);
ALLOY_WMMA_FRAGMENT(accumulator, __half, void);
#undef ALLOY_WMMA_FRAGMENT

template <class T, int size>
inline void fill_fragment(::alloy::emulator::wmma::FragmentBase<T, size>& frag,
                          const typename ::alloy::emulator::detail::NonDeduced<T>::type& value) {
  for (T& element : frag.x)
    element = value;
}

// A matrix_a or matrix_b tile, in the memory order of its Layout.
template <class Use, class T, class Layout,
          class = std::enable_if_t<!std::is_same_v<Use, accumulator>>>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& frag,
                             const typename ::alloy::emulator::detail::NonDeduced<T>::type* pointer,
                             unsigned ldm) {
  ::alloy::emulator::wmma::load(::alloy::emulator::wmma::type_of(frag), frag.x, pointer, ldm,
                                ::alloy::emulator::wmma::type_of(frag).order);
}

template <class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& frag,
                             const typename ::alloy::emulator::detail::NonDeduced<T>::type* pointer,
                             unsigned ldm, layout_t layout) {
  ::alloy::emulator::wmma::load(::alloy::emulator::wmma::type_of(frag), frag.x, pointer, ldm,
                                ::alloy::emulator::wmma::order_of(layout));
}

template <class T>
inline void store_matrix_sync(typename ::alloy::emulator::detail::NonDeduced<T>::type* pointer,
                              const fragment<accumulator, 16, 16, 16, T>& frag, unsigned ldm,
                              layout_t layout) {
  ::alloy::emulator::wmma::store(::alloy::emulator::wmma::type_of(frag), pointer, frag.x, ldm,
                                 ::alloy::emulator::wmma::order_of(layout));
}

// d = a * b + c (d may be c): each product exact, summed in fp32 in k order from c; a __half d
// is rounded once at the end.
template <class D, class T, class LayoutA, class LayoutB, class C>
inline void mma_sync(fragment<accumulator, 16, 16, 16, D>& d,
                     const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, C>& c) {
  static_assert(
      !std::is_same_v<T, __nv_bfloat16> || (std::is_same_v<D, float> && std::is_same_v<C, float>),
      "CUDA's __nv_bfloat16 mma_sync accumulates in float only");
  namespace emulated = ::alloy::emulator::wmma;
  emulated::mma(emulated::type_of(d), d.x, emulated::type_of(a), a.x, emulated::type_of(b), b.x,
                emulated::type_of(c), c.x);
}

}  // namespace nvcuda::wmma
