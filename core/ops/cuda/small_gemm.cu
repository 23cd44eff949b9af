#include "core/ops/cuda/small_gemm.h"

#include <type_traits>

#include "core/error.h"
#include "core/ops/cuda/common.cuh"

namespace alloy::cuda {

namespace {

// A block's tile of c: 32 rows by 32 columns, 256 threads. Thread (lane, row) sums the outputs
// of column lane and rows row, row + 8, row + 16, row + 24 over k, 32 at a time from shared
// memory, while the next kAhead chunks' values of a and b are loaded.
constexpr int kTileSize = 32;
constexpr int kRows = 8;  // warps of a block
constexpr int kOutputsPerThread = kTileSize / kRows;
constexpr int kGemmThreads = kTileSize * kRows;
constexpr int kStaged = kTileSize * kTileSize / kGemmThreads;  // values of a (and b) a thread loads
constexpr long kMaxOutputs = 1L << 18;
constexpr int kMaxK = 512;
// Chunks of 32 k's whose loads are in flight at once. Four were expected to hide much of the
// load latency that one leaves exposed; on LeNet's products they measured no faster than one.
constexpr int kAhead = 4;

// Element (row, column) of a row-major [rows, columns] matrix with `stride` columns; zero past
// its edge, so partial tiles add nothing.
template <class T>
__device__ __forceinline__ float tile_value(const T* matrix, int stride, int rows, int columns,
                                            int row, int column) {
  return row < rows && column < columns
             ? widen(matrix[static_cast<std::int64_t>(row) * stride + column])
             : 0.0f;
}

template <class T, bool kATransposed, bool kBTransposed>
__global__ void __launch_bounds__(kGemmThreads)
    small_gemm_kernel(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ bias,
                      void* c, DType c_dtype, int m, int n, int k, bool accumulate,
                      std::bool_constant<kATransposed>, std::bool_constant<kBTransposed>) {
  // [k][m] and [k][n] tiles; a row of 33 keeps the transposing stores free of bank conflicts.
  __shared__ float as[kTileSize][kTileSize + 1];
  __shared__ float bs[kTileSize][kTileSize + 1];
  const int lane = threadIdx.x % kTileSize, row = threadIdx.x / kTileSize;
  const int m0 = blockIdx.y * kTileSize, n0 = blockIdx.x * kTileSize;
  // Staged value s of a thread: where its 32 lanes read along the matrix's rows (coalesced),
  // and where it goes in the tile. kAhead chunks' values are loaded at once, each into its own
  // slot of the ring, so that their loads overlap.
  float a_next[kAhead][kStaged], b_next[kAhead][kStaged];
  const auto load = [&](int k0, float(&a_slot)[kStaged], float(&b_slot)[kStaged]) {
    ALLOY_UNROLL
    for (int s = 0; s < kStaged; ++s) {
      const int across = row + kRows * s;
      a_slot[s] = kATransposed ? tile_value(a, m, k, m, k0 + across, m0 + lane)
                               : tile_value(a, k, m, k, m0 + across, k0 + lane);
      b_slot[s] = kBTransposed ? tile_value(b, k, n, k, n0 + across, k0 + lane)
                               : tile_value(b, n, k, n, k0 + across, n0 + lane);
    }
  };
  float acc[kOutputsPerThread] = {};
  const int chunks = (k + kTileSize - 1) / kTileSize;
  ALLOY_UNROLL
  for (int slot = 0; slot < kAhead; ++slot)
    if (slot < chunks) load(slot * kTileSize, a_next[slot], b_next[slot]);
  for (int first = 0; first < chunks; first += kAhead) {
    // Unrolled, so that each slot of the ring is a register, never memory.
    ALLOY_UNROLL
    for (int slot = 0; slot < kAhead; ++slot) {
      const int chunk = first + slot;
      if (chunk >= chunks) break;
      const int k0 = chunk * kTileSize;
      __syncthreads();  // the previous tiles are no longer read
      ALLOY_UNROLL
      for (int s = 0; s < kStaged; ++s) {
        const int across = row + kRows * s;
        if (kATransposed) {
          as[across][lane] = a_next[slot][s];
        } else {
          as[lane][across] = a_next[slot][s];
        }
        if (kBTransposed) {
          bs[lane][across] = b_next[slot][s];
        } else {
          bs[across][lane] = b_next[slot][s];
        }
      }
      __syncthreads();
      if (chunk + kAhead < chunks) load(k0 + kAhead * kTileSize, a_next[slot], b_next[slot]);
      const auto sum_over = [&](int kk) {
        const float value = bs[kk][lane];
        ALLOY_UNROLL
        for (int q = 0; q < kOutputsPerThread; ++q)
          acc[q] = fmaf(as[kk][row + kRows * q], value, acc[q]);
      };
      // A whole chunk unrolled, so that its shared-memory loads are in flight together: looped,
      // each k waited for its loads.
      if (k - k0 >= kTileSize) {
        ALLOY_UNROLL
        for (int kk = 0; kk < kTileSize; ++kk)
          sum_over(kk);
      } else {
        for (int kk = 0; kk < k - k0; ++kk)
          sum_over(kk);
      }
    }
  }
  const int column = n0 + lane;
  if (column >= n) return;
  const float added = bias != nullptr ? widen(bias[column]) : 0.0f;
  ALLOY_UNROLL
  for (int q = 0; q < kOutputsPerThread; ++q) {
    const int output_row = m0 + row + kRows * q;
    if (output_row >= m) continue;
    const std::int64_t at = static_cast<std::int64_t>(output_row) * n + column;
    float sum = bias != nullptr ? __fadd_rn(acc[q], added) : acc[q];
    if (accumulate) sum = __fadd_rn(load_any(c, c_dtype, at), sum);
    store_any(c, c_dtype, at, sum);
  }
}

}  // namespace

bool small_gemm_fits(int m, int n, int k) {
  const long outputs = static_cast<long>(m) * n;
  return m > 0 && n > 0 && k >= 0 && outputs <= kMaxOutputs && k <= kMaxK;
}

void small_gemm(const SmallGemm& shape, const void* a, const void* b, DType dtype, const void* bias,
                void* c, DType c_dtype, bool accumulate, cudaStream_t stream) {
  ALLOY_CHECK(small_gemm_fits(shape.m, shape.n, shape.k), "small_gemm: a [", shape.m, ", ", shape.k,
              "] x [", shape.k, ", ", shape.n, "] product is more than it takes");
  ALLOY_CHECK(c_dtype == DType::f32 || c_dtype == dtype, "small_gemm: a ", dtype_name(c_dtype),
              " output of ", dtype_name(dtype), " operands");
  const dim3 grid((shape.n + kTileSize - 1) / kTileSize, (shape.m + kTileSize - 1) / kTileSize);
  dispatch_floating(dtype, "small_gemm", [&](auto type) {
    using T = decltype(type);
    const auto launch = [&](auto a_transposed, auto b_transposed) {
      ALLOY_LAUNCH(small_gemm_kernel, grid, kGemmThreads, 0, stream)
      (static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(bias), c, c_dtype,
       shape.m, shape.n, shape.k, accumulate, a_transposed, b_transposed);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (shape.a_transposed) {
      shape.b_transposed ? launch(Yes{}, Yes{}) : launch(Yes{}, No{});
    } else {
      shape.b_transposed ? launch(No{}, Yes{}) : launch(No{}, No{});
    }
  });
  ALLOY_CUDA_CHECK_LAUNCH("small_gemm_kernel over [", shape.m, ", ", shape.k, "] x [", shape.k,
                          ", ", shape.n, "]");
}

}  // namespace alloy::cuda
