// The CUDA emulator's nvcuda::wmma: 16x16x16 tiles of __half and __nv_bfloat16 in every layout
// against host models (exact products, fp32 sums in k order from c), a GEMM of four warps
// through shared memory, and the device faults of calls that a GPU leaves undefined.
#define BOOST_TEST_MODULE cuda_emulator_wmma
#include <boost/test/unit_test.hpp>

// clang-format off: the prelude comes first, as in every emulated .cu file
#include "tools/cuda_emulator/prelude.h"
// clang-format on

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/ops/cuda/common.cuh"
#include "tools/cuda_emulator/emulator.h"
#include "tools/cuda_emulator/kernel.h"

namespace wmma = nvcuda::wmma;
using alloy::cuda::narrow;
using alloy::cuda::widen;
using alloy::emulator::DeviceFault;
using alloy::emulator::run_grid;

namespace {

constexpr int kSide = 16;
using Tile = std::array<float, kSide * kSide>;  // row major

// Device memory for one tile: 32-byte aligned, `ld` apart, in either order.
template <class T>
struct TileMemory {
  static constexpr unsigned int ld = 24;  // a multiple of 8 (16-bit) and 4 (float), not 16
  alignas(32) std::array<T, kSide * ld> data;

  TileMemory() { data.fill(narrow<T>(NAN)); }

  T* at(int row, int column, wmma::layout_t layout) {
    return &data[layout == wmma::mem_row_major ? row * ld + column : column * ld + row];
  }
  void write(const Tile& tile, wmma::layout_t layout) {
    for (int i = 0; i < kSide * kSide; ++i)
      *at(i / kSide, i % kSide, layout) = narrow<T>(tile[i]);
  }
  Tile read(wmma::layout_t layout) {
    Tile tile{};
    for (int i = 0; i < kSide * kSide; ++i)
      tile[i] = widen(*at(i / kSide, i % kSide, layout));
    return tile;
  }
};

template <class Layout>
constexpr wmma::layout_t layout_of() {
  return std::is_same_v<Layout, wmma::col_major> ? wmma::mem_col_major : wmma::mem_row_major;
}

// d = a * b + c on one warp: a and b in their Layouts' orders, c loaded in `c_layout`, d stored
// in `d_layout`. C and D are the accumulator types.
template <class T, class LayoutA, class LayoutB, class C = float, class D = float>
Tile multiply_tile(const Tile& a, const Tile& b, const Tile& c, wmma::layout_t c_layout,
                   wmma::layout_t d_layout) {
  TileMemory<T> a_memory, b_memory;
  TileMemory<C> c_memory;
  TileMemory<D> d_memory;
  a_memory.write(a, layout_of<LayoutA>());
  b_memory.write(b, layout_of<LayoutB>());
  c_memory.write(c, c_layout);
  run_grid("wmma_tile", dim3(1), dim3(32), [&] {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> a_fragment;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> b_fragment;
    wmma::fragment<wmma::accumulator, 16, 16, 16, C> c_fragment;
    wmma::fragment<wmma::accumulator, 16, 16, 16, D> d_fragment;
    wmma::load_matrix_sync(a_fragment, a_memory.data.data(), a_memory.ld);
    wmma::load_matrix_sync(b_fragment, b_memory.data.data(), b_memory.ld);
    wmma::load_matrix_sync(c_fragment, c_memory.data.data(), c_memory.ld, c_layout);
    wmma::mma_sync(d_fragment, a_fragment, b_fragment, c_fragment);
    wmma::store_matrix_sync(d_memory.data.data(), d_fragment, d_memory.ld, d_layout);
  });
  return d_memory.read(d_layout);
}

// What the tile multiply computes: exact products, added in fp32 in k order from c.
Tile multiply_model(const Tile& a, const Tile& b, const Tile& c) {
  Tile d{};
  for (int row = 0; row < kSide; ++row) {
    for (int column = 0; column < kSide; ++column) {
      float sum = c[row * kSide + column];
      for (int k = 0; k < kSide; ++k)
        sum = std::fma(a[row * kSide + k], b[k * kSide + column], sum);
      d[row * kSide + column] = sum;
    }
  }
  return d;
}

// Random values in [-1, 1), rounded to T.
template <class T>
Tile random_tile(unsigned int seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  Tile tile{};
  for (float& value : tile)
    value = widen(narrow<T>(distribution(generator)));
  return tile;
}

void check_equal(const Tile& actual, const Tile& expected) {
  for (int i = 0; i < kSide * kSide; ++i) {
    BOOST_TEST_INFO("row " << i / kSide << ", column " << i % kSide);
    BOOST_CHECK_EQUAL(actual[i], expected[i]);
  }
}

// Small integers: every product and sum is exact, whatever the order.
template <class T>
void check_exact_tiles() {
  Tile a{}, b{}, c{};
  Tile expected{};
  for (int i = 0; i < kSide * kSide; ++i) {
    const int row = i / kSide, column = i % kSide;
    a[i] = static_cast<float>((row * 3 + column * 5) % 9 - 4);
    b[i] = static_cast<float>((row * 7 + column * 2) % 7 - 3);
    c[i] = static_cast<float>(row - 2 * column);
  }
  for (int i = 0; i < kSide * kSide; ++i) {
    const int row = i / kSide, column = i % kSide;
    int sum = static_cast<int>(c[i]);
    for (int k = 0; k < kSide; ++k)
      sum += static_cast<int>(a[row * kSide + k]) * static_cast<int>(b[k * kSide + column]);
    expected[i] = static_cast<float>(sum);
  }
  for (const wmma::layout_t c_layout : {wmma::mem_row_major, wmma::mem_col_major}) {
    for (const wmma::layout_t d_layout : {wmma::mem_row_major, wmma::mem_col_major}) {
      BOOST_TEST_CONTEXT("c " << c_layout << ", d " << d_layout) {
        check_equal(multiply_tile<T, wmma::row_major, wmma::row_major>(a, b, c, c_layout, d_layout),
                    expected);
        check_equal(multiply_tile<T, wmma::row_major, wmma::col_major>(a, b, c, c_layout, d_layout),
                    expected);
        check_equal(multiply_tile<T, wmma::col_major, wmma::row_major>(a, b, c, c_layout, d_layout),
                    expected);
        check_equal(multiply_tile<T, wmma::col_major, wmma::col_major>(a, b, c, c_layout, d_layout),
                    expected);
      }
    }
  }
}

// A clean tile after a fault: the engine is in order.
void check_engine_works() {
  const Tile a = random_tile<__half>(1), b = random_tile<__half>(2), c = random_tile<float>(3);
  check_equal(multiply_tile<__half, wmma::row_major, wmma::col_major>(a, b, c, wmma::mem_row_major,
                                                                      wmma::mem_row_major),
              multiply_model(a, b, c));
}

// The DeviceFault's message of a one-warp grid (or `threads` threads); fails the test if it
// runs cleanly.
std::string wmma_fault(const std::function<void()>& body, unsigned int threads = 32) {
  std::string message;
  try {
    run_grid("wmma_fault", dim3(1), dim3(threads), body);
    BOOST_ERROR("the grid ran without a fault");
  } catch (const DeviceFault& fault) {
    message = fault.what();
  }
  check_engine_works();
  return message;
}

void check_contains(const std::string& message, const std::string& part) {
  BOOST_TEST_INFO("message: " << message);
  BOOST_CHECK(message.find(part) != std::string::npos);
}

using HalfA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using HalfB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>;
using FloatAccumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

}  // namespace

BOOST_AUTO_TEST_CASE(fragments_hold_a_lanes_share_as_on_a_gpu) {
  BOOST_CHECK_EQUAL(HalfA::num_elements, 16);
  BOOST_CHECK_EQUAL(HalfB::num_elements, 16);
  BOOST_CHECK_EQUAL(
      (wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major>::num_elements),
      8);
  BOOST_CHECK_EQUAL(FloatAccumulator::num_elements, 8);
  BOOST_CHECK_EQUAL((wmma::fragment<wmma::accumulator, 16, 16, 16, __half>::num_elements), 8);
}

BOOST_AUTO_TEST_CASE(exact_f16_tiles_in_every_layout) {
  check_exact_tiles<__half>();
}

BOOST_AUTO_TEST_CASE(exact_bf16_tiles_in_every_layout) {
  check_exact_tiles<__nv_bfloat16>();
}

BOOST_AUTO_TEST_CASE(random_tiles_sum_in_fp32_in_k_order_bit_for_bit) {
  for (unsigned int seed = 0; seed < 4; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      const Tile c = random_tile<float>(100 + seed);
      const Tile a = random_tile<__half>(seed), b = random_tile<__half>(10 + seed);
      check_equal(multiply_tile<__half, wmma::row_major, wmma::col_major>(
                      a, b, c, wmma::mem_col_major, wmma::mem_row_major),
                  multiply_model(a, b, c));
      const Tile a16 = random_tile<__nv_bfloat16>(seed),
                 b16 = random_tile<__nv_bfloat16>(10 + seed);
      check_equal(multiply_tile<__nv_bfloat16, wmma::col_major, wmma::row_major>(
                      a16, b16, c, wmma::mem_row_major, wmma::mem_col_major),
                  multiply_model(a16, b16, c));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_half_accumulator_is_rounded_once_at_the_end) {
  const Tile a = random_tile<__half>(5), b = random_tile<__half>(6);
  const Tile c = random_tile<__half>(7);
  Tile expected = multiply_model(a, b, c);
  for (float& value : expected)
    value = widen(narrow<__half>(value));
  check_equal(multiply_tile<__half, wmma::row_major, wmma::row_major, __half, __half>(
                  a, b, c, wmma::mem_row_major, wmma::mem_row_major),
              expected);
  check_equal(multiply_tile<__half, wmma::col_major, wmma::col_major, float, __half>(
                  a, b, c, wmma::mem_col_major, wmma::mem_row_major),
              expected);
  check_equal(multiply_tile<__half, wmma::row_major, wmma::col_major, __half, float>(
                  a, b, c, wmma::mem_row_major, wmma::mem_col_major),
              multiply_model(a, b, c));
}

BOOST_AUTO_TEST_CASE(uniform_work_on_x_fill_and_a_fresh_fragment) {
  const Tile a = random_tile<__half>(8), b = random_tile<__half>(9);
  TileMemory<__half> a_memory, b_memory;
  a_memory.write(a, wmma::mem_row_major);
  b_memory.write(b, wmma::mem_col_major);
  TileMemory<float> scaled, unfilled;
  run_grid("wmma_uniform", dim3(1), dim3(32), [&] {
    HalfA a_fragment;
    HalfB b_fragment;
    wmma::load_matrix_sync(a_fragment, a_memory.data.data(), a_memory.ld);
    wmma::load_matrix_sync(b_fragment, b_memory.data.data(), b_memory.ld);
    for (int i = 0; i < a_fragment.num_elements; ++i)
      a_fragment.x[i] = __float2half_rn(2.0f * __half2float(a_fragment.x[i]));
    FloatAccumulator c_fragment;
    wmma::fill_fragment(c_fragment, 0.5f);
    wmma::mma_sync(c_fragment, a_fragment, b_fragment, c_fragment);  // d is c
    wmma::store_matrix_sync(scaled.data.data(), c_fragment, scaled.ld, wmma::mem_row_major);
    FloatAccumulator never_written;
    wmma::mma_sync(c_fragment, a_fragment, b_fragment, never_written);
    wmma::store_matrix_sync(unfilled.data.data(), c_fragment, unfilled.ld, wmma::mem_row_major);
  });
  Tile twice_a{}, half{};
  for (int i = 0; i < kSide * kSide; ++i) {
    twice_a[i] = 2.0f * a[i];
    half[i] = 0.5f;
  }
  check_equal(scaled.read(wmma::mem_row_major), multiply_model(twice_a, b, half));
  const Tile nan = unfilled.read(wmma::mem_row_major);
  BOOST_CHECK(std::all_of(nan.begin(), nan.end(), [](float v) { return std::isnan(v); }));
}

// CUDA leaves each use's layout unspecified, and the emulator's differ: an accumulator's x[]
// converted into a matrix_a fragment (both 8 elements for bf16) scrambles the tile here.
BOOST_AUTO_TEST_CASE(x_copied_between_uses_lands_elsewhere) {
  const Tile tile = random_tile<__nv_bfloat16>(12);
  Tile identity{};
  for (int i = 0; i < kSide; ++i)
    identity[i * kSide + i] = 1.0f;
  TileMemory<float> tile_memory, product;
  TileMemory<__nv_bfloat16> identity_memory;
  tile_memory.write(tile, wmma::mem_row_major);
  identity_memory.write(identity, wmma::mem_row_major);
  run_grid("wmma_reuse", dim3(1), dim3(32), [&] {
    FloatAccumulator c;
    wmma::load_matrix_sync(c, tile_memory.data.data(), tile_memory.ld, wmma::mem_row_major);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    for (int i = 0; i < a.num_elements; ++i)
      a.x[i] = __float2bfloat16_rn(c.x[i]);
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::load_matrix_sync(b, identity_memory.data.data(), identity_memory.ld);
    wmma::fill_fragment(c, 0.0f);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(product.data.data(), c, product.ld, wmma::mem_row_major);
  });
  const Tile result = product.read(wmma::mem_row_major);
  int moved = 0;
  for (int i = 0; i < kSide * kSide; ++i)
    moved += result[i] != tile[i];
  BOOST_CHECK_GT(moved, kSide * kSide / 2);
}

// C = A * B, 32x32x32: four warps, each one 16x16 tile of C, two k steps over A and B in
// shared memory with padded rows.
BOOST_AUTO_TEST_CASE(gemm_32x32x32_of_2x2_warps_through_shared_memory) {
  constexpr int kN = 32;
  constexpr unsigned int kLd = 40;  // padded, a multiple of 8 and of 16 elements' 32 bytes
  std::mt19937 generator(11);
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  std::vector<__half> a(kN * kN), b(kN * kN);
  for (__half& value : a)
    value = __float2half_rn(distribution(generator));
  for (__half& value : b)
    value = __float2half_rn(distribution(generator));
  alignas(32) std::array<float, kN * kN> c{};
  run_grid("wmma_gemm", dim3(1), dim3(128), [&] {
    __shared__ __align__(32) __half a_shared[kN * kLd];
    __shared__ __align__(32) __half b_shared[kN * kLd];  // column major
    for (unsigned int i = threadIdx.x; i < kN * kN; i += blockDim.x) {
      const unsigned int row = i / kN, column = i % kN;
      a_shared[row * kLd + column] = a[i];
      b_shared[column * kLd + row] = b[i];
    }
    __syncthreads();
    const unsigned int warp = threadIdx.x / 32;
    const unsigned int tile_row = warp / 2 * 16, tile_column = warp % 2 * 16;
    FloatAccumulator accumulator;
    wmma::fill_fragment(accumulator, 0.0f);
    for (unsigned int k = 0; k < kN; k += 16) {
      HalfA a_fragment;
      HalfB b_fragment;
      wmma::load_matrix_sync(a_fragment, a_shared + tile_row * kLd + k, kLd);
      wmma::load_matrix_sync(b_fragment, b_shared + tile_column * kLd + k, kLd);
      wmma::mma_sync(accumulator, a_fragment, b_fragment, accumulator);
    }
    wmma::store_matrix_sync(c.data() + tile_row * kN + tile_column, accumulator, kN,
                            wmma::mem_row_major);
  });
  for (int row = 0; row < kN; ++row) {
    for (int column = 0; column < kN; ++column) {
      float sum = 0.0f;
      for (int k = 0; k < kN; ++k)
        sum = std::fma(__half2float(a[row * kN + k]), __half2float(b[k * kN + column]), sum);
      BOOST_TEST_INFO("row " << row << ", column " << column);
      BOOST_CHECK_EQUAL(c[row * kN + column], sum);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_call_that_half_the_warp_makes_is_a_device_fault) {
  TileMemory<__half> memory;
  const std::string message = wmma_fault([&] {
    if (threadIdx.x >= 16) return;
    HalfA a;
    HalfB b;
    FloatAccumulator c;
    wmma::fill_fragment(a, __float2half(1.0f));
    wmma::fill_fragment(b, __float2half(1.0f));
    wmma::fill_fragment(c, 0.0f);
    wmma::mma_sync(c, a, b, c);
  });
  check_contains(message,
                 "kernel wmma_fault, block (0,0,0): wmma::mma_sync in warp 0 reached by lanes "
                 "0-15; lanes 16-31 had returned");
  check_contains(wmma_fault([&] {
                   HalfA a;
                   if (threadIdx.x % 32 < 8) {
                     wmma::load_matrix_sync(a, memory.data.data(), memory.ld);
                   } else {
                     FloatAccumulator c;
                     wmma::store_matrix_sync(reinterpret_cast<float*>(memory.data.data()), c, 8,
                                             wmma::mem_row_major);
                   }
                 }),
                 "wmma::load_matrix_sync in warp 0 reached by lanes 0-7; lanes 8-31 waiting at "
                 "wmma::store_matrix_sync");
}

BOOST_AUTO_TEST_CASE(a_warp_of_fewer_than_32_lanes_is_a_device_fault) {
  check_contains(wmma_fault(
                     [] {
                       FloatAccumulator c;
                       wmma::fill_fragment(c, 0.0f);
                       float out[16 * 16];
                       wmma::store_matrix_sync(out, c, 16, wmma::mem_row_major);
                     },
                     48),
                 "thread 32 (32,0,0): wmma::store_matrix_sync needs all 32 lanes of a warp, and "
                 "warp 1 has only 16 (the block has 48 threads)");
}

BOOST_AUTO_TEST_CASE(a_misaligned_pointer_is_a_device_fault) {
  TileMemory<__half> memory;
  TileMemory<float> floats;
  const std::string message = wmma_fault([&] {
    HalfA a;
    wmma::load_matrix_sync(a, memory.data.data() + 8, memory.ld);  // 16 bytes in
  });
  check_contains(message, "wmma::load_matrix_sync in warp 0: pointer 0x");
  check_contains(message, " is not 256-bit (32-byte) aligned");
  check_contains(wmma_fault([&] {
                   FloatAccumulator c;
                   wmma::fill_fragment(c, 0.0f);
                   wmma::store_matrix_sync(floats.data.data() + 1, c, floats.ld,
                                           wmma::mem_col_major);
                 }),
                 "is not 256-bit (32-byte) aligned");
}

BOOST_AUTO_TEST_CASE(an_ldm_that_is_not_a_multiple_of_16_bytes_is_a_device_fault) {
  TileMemory<__half> memory;
  TileMemory<float> floats;
  check_contains(wmma_fault([&] {
                   HalfB b;
                   wmma::load_matrix_sync(b, memory.data.data(), 20);
                 }),
                 "wmma::load_matrix_sync in warp 0: ldm 20 is not a multiple of 8 (16 bytes of "
                 "2-byte elements)");
  check_contains(wmma_fault([&] {
                   FloatAccumulator c;
                   wmma::load_matrix_sync(c, floats.data.data(), 18, wmma::mem_row_major);
                 }),
                 "ldm 18 is not a multiple of 4 (16 bytes of 4-byte elements)");
}

BOOST_AUTO_TEST_CASE(lanes_that_pass_different_arguments_are_a_device_fault) {
  TileMemory<__half> memory;
  const std::string message = wmma_fault([&] {
    HalfA a;
    wmma::load_matrix_sync(a, memory.data.data() + (threadIdx.x < 16 ? 0 : 16), memory.ld);
  });
  check_contains(message,
                 "wmma::load_matrix_sync in warp 0 with different arguments: lanes 0-15 pass a "
                 "matrix_a __half row_major fragment, pointer 0x");
  check_contains(message, ", ldm 24, row major; lanes 16-31 pass a matrix_a __half row_major");
}

BOOST_AUTO_TEST_CASE(lane_dependent_work_on_x_is_a_device_fault) {
  TileMemory<__half> memory;
  memory.write(random_tile<__half>(4), wmma::mem_row_major);
  check_contains(wmma_fault([&] {
                   HalfA a;
                   HalfB b;
                   FloatAccumulator c;
                   wmma::load_matrix_sync(a, memory.data.data(), memory.ld);
                   wmma::fill_fragment(b, __float2half(1.0f));
                   wmma::fill_fragment(c, 0.0f);
                   if (threadIdx.x == 3) a.x[0] = __float2half(0.0f);
                   wmma::mma_sync(c, a, b, c);
                 }),
                 "wmma::mma_sync in warp 0: lanes 3 and 19 hold different values of a's element");
}
