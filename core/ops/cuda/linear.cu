#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "core/cuda/context.h"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/gemm.h"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/linear.h"
#include "core/ops/cuda/small_gemm.h"

namespace alloy::cuda {

namespace {

// Every row of y is b: blocks along x cover the columns, along y every gridDim.y-th row, so no
// thread divides an index.
template <class T>
__global__ void broadcast_rows_kernel(const T* b, T* y, int rows, int columns) {
  const int column = blockIdx.x * blockDim.x + threadIdx.x;
  if (column >= columns) return;
  const T value = b[column];
  for (int row = blockIdx.y; row < rows; row += gridDim.y)
    y[static_cast<std::int64_t>(row) * columns + column] = value;
}

// Column sums in tiles of 32 columns by 32 row lanes: the lanes of a warp read 32 neighbouring
// columns of a row (coalesced), the block's 32 warps take every 32nd row of the block's row
// chunk, 8 rows per thread at a time, all 8 loads in flight at once (a batch of 256 rows is one
// round trip to memory, and needs no second step). The 32 sums of a column are then added
// by one warp in a fixed tree. With several row chunks (grid y), each block stores its partial
// sums and the grid's last block adds them in chunk order. Every order is fixed: deterministic
// (and, being another order than the CPU's, within its rounding, as the tests check).
constexpr int kTileColumns = 32;
constexpr int kTileRows = 32;
constexpr int kRowsPerThread = 8;
constexpr int kChunkRows = kTileRows * kRowsPerThread;
constexpr int kMaxRowChunks = 1024;

// Forwards of at most this many outputs over more than this many inputs add their bias apart
// and leave the GEMM to cuBLAS's own choice, which splits k (linear_forward).
constexpr std::int64_t kSplitKOutputs = std::int64_t{1} << 15;
constexpr int kSplitKInputs = 512;

template <class T>
__global__ void __launch_bounds__(kTileColumns* kTileRows)
    column_sums_kernel(const T* dy, int rows, int columns, int chunk_rows, void* bias,
                       DType bias_dtype, float* partials, unsigned int* arrivals) {
  __shared__ float tile[kTileRows][kTileColumns + 1];
  const int begin = blockIdx.y * chunk_rows;
  const int end = min(begin + chunk_rows, rows);
  {
    const int column = blockIdx.x * kTileColumns + threadIdx.x;
    float sum = 0.0f;
    if (column < columns) {
      // Rows past the chunk load as +0, which leaves any sum that started at +0 unchanged.
      for (int first = begin + threadIdx.y; first < end; first += kChunkRows) {
        float values[kRowsPerThread];
        for (int k = 0; k < kRowsPerThread; ++k) {
          const int row = first + k * kTileRows;
          values[k] =
              row < end ? widen(dy[static_cast<std::int64_t>(row) * columns + column]) : 0.0f;
        }
        for (int k = 0; k < kRowsPerThread; ++k)
          sum += values[k];
      }
    }
    tile[threadIdx.y][threadIdx.x] = sum;
  }
  __syncthreads();
  // Warp w adds the lanes' sums of the tile's column w.
  const int column = blockIdx.x * kTileColumns + threadIdx.y;
  float sum = tile[threadIdx.x][threadIdx.y];
  for (int offset = 16; offset > 0; offset /= 2)
    sum += __shfl_down_sync(0xffffffffu, sum, offset);
  const bool writer = threadIdx.x == 0 && column < columns;
  if (gridDim.y == 1) {
    if (writer) store_any(bias, bias_dtype, column, load_any(bias, bias_dtype, column) + sum);
    return;
  }
  if (writer) partials[static_cast<std::int64_t>(blockIdx.y) * columns + column] = sum;
  if (!arrive_last(arrivals)) return;
  for (int c = threadIdx.y * kTileColumns + threadIdx.x; c < columns;
       c += kTileColumns * kTileRows) {
    float total = 0.0f;
    for (unsigned int k = 0; k < gridDim.y; ++k)
      total += __ldcg(partials + static_cast<std::int64_t>(k) * columns + c);
    store_any(bias, bias_dtype, c, load_any(bias, bias_dtype, c) + total);
  }
}

using MatmulDesc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using MatrixLayout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using MatmulPreference = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// y = x w^T + b as one cuBLASLt matmul whose epilogue adds the bias (CUBLASLT_EPILOGUE_BIAS):
// D = alpha op(A) op(B) + bias, accumulated in fp32 and rounded once into y, exactly what the
// bias broadcast followed by a beta = 1 GEMM gives, in one launch instead of two. Column-major,
// y^T [out, batch] = w [in, out]^T x^T [in, batch], so the bias runs along D's rows.
struct BiasGemmPlan {
  bool fused = false;  // false: cuBLASLt offered no algorithm; the two-launch path runs
  MatmulDesc desc;
  MatrixLayout a, b, d;
  cublasLtMatmulAlgo_t algo{};
};

// The largest power of two up to 256 dividing the address: cuBLASLt assumes 256-byte aligned
// matrices unless told otherwise, and some of its kernels need it.
std::uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

template <class Value>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const Value& value) {
  ALLOY_CUDA_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value),
                   "linear_forward: setting cuBLASLt matmul attribute ",
                   static_cast<int>(attribute));
}

template <class Value>
void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, const Value& value) {
  ALLOY_CUDA_CHECK(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value),
      "linear_forward: setting cuBLASLt preference ", static_cast<int>(attribute));
}

MatrixLayout layout(DType dtype, int rows, int columns, int ld) {
  cublasLtMatrixLayout_t raw = nullptr;
  ALLOY_CUDA_CHECK(
      cublasLtMatrixLayoutCreate(&raw, cuda_data_type(dtype), static_cast<std::uint64_t>(rows),
                                 static_cast<std::uint64_t>(columns), ld),
      "linear_forward: describing a ", dtype_name(dtype), " [", rows, ", ", columns,
      "] matrix for cuBLASLt");
  return MatrixLayout(raw);
}

// `bias` is the bias of the first call: cuBLASLt's heuristic does not read it, but infers from
// its address the alignment the chosen kernel may assume (unset, it is null: aligned to anything).
BiasGemmPlan make_bias_gemm_plan(cublasLtHandle_t lt, DType dtype, int batch, int in, int out,
                                 std::uint32_t alignment, const void* bias,
                                 std::size_t workspace_bytes) {
  BiasGemmPlan plan;
  cublasLtMatmulDesc_t desc = nullptr;
  // fp32 compute and scale for every storage type: true fp32 for f32 data unless --allow-tf32.
  ALLOY_CUDA_CHECK(cublasLtMatmulDescCreate(&desc, gemm_compute_type(dtype), CUDA_R_32F),
                   "linear_forward: creating a cuBLASLt matmul descriptor");
  plan.desc = MatmulDesc(desc);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  plan.a = layout(dtype, in, out, in);
  plan.b = layout(dtype, in, batch, in);
  plan.d = layout(dtype, out, batch, out);

  cublasLtMatmulPreference_t raw = nullptr;
  ALLOY_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&raw),
                   "linear_forward: creating a cuBLASLt preference");
  const MatmulPreference preference(raw);
  set_preference(raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                 static_cast<std::uint64_t>(workspace_bytes));
  // Split-k partial sums are added in fp32 (the compute type), never in a half output: the
  // numerics contract, as CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION is for cuBLAS.
  set_preference(raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                 static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE));
  for (const auto attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    set_preference(raw, attribute, alignment);
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      lt, desc, plan.a.get(), plan.b.get(), plan.d.get(), plan.d.get(), raw, 1, &result, &found);
  // No algorithm for this shape, dtype or alignment: the plan says so and the caller takes the
  // two-launch path (linear_bias_epilogue_plans lets a test see which).
  plan.fused =
      status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.fused) plan.algo = result.algo;
  return plan;
}

// (device, dtype, compute type, batch, in, out, alignment of x, w and y, alignment of the bias).
using BiasGemmKey = std::tuple<int, int, int, int, int, int, std::uint32_t, std::uint32_t>;

struct BiasGemmCache {
  std::mutex mutex;
  std::map<BiasGemmKey, std::unique_ptr<BiasGemmPlan>> plans;
};

BiasGemmCache& bias_gemm_cache() {
  static BiasGemmCache cache;
  return cache;
}

// Runs y = x w^T + b through the plan for this shape and returns true, or returns false when
// cuBLASLt has no such algorithm.
bool fused_bias_gemm(int batch, int in, int out, const void* x, const void* w, const void* b,
                     void* y, DType dtype, cudaStream_t stream) {
  int device = -1;
  ALLOY_CUDA_CHECK(cudaGetDevice(&device), "reading the current device");
  DeviceContext& ctx = context(Device::cuda(device));
  const std::uint32_t alignment = std::min({alignment_of(x), alignment_of(w), alignment_of(y)});
  const BiasGemmKey key{device,
                        static_cast<int>(dtype),
                        static_cast<int>(gemm_compute_type(dtype)),
                        batch,
                        in,
                        out,
                        alignment,
                        alignment_of(b)};
  BiasGemmCache& cache = bias_gemm_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);  // the descriptor's bias pointer is set per call
  auto& slot = cache.plans[key];
  if (!slot) {
    slot = std::make_unique<BiasGemmPlan>(make_bias_gemm_plan(
        ctx.cublas_lt.get(), dtype, batch, in, out, alignment, b, ctx.cublas.workspace_bytes()));
  }
  BiasGemmPlan& plan = *slot;
  if (!plan.fused) return false;
  set_attribute(plan.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, b);
  const float one = 1.0f, zero = 0.0f;
  // The cuBLAS handle's workspace: both libraries' calls run in order on this one stream.
  const cublasStatus_t status =
      cublasLtMatmul(ctx.cublas_lt.get(), plan.desc.get(), &one, w, plan.a.get(), x, plan.b.get(),
                     &zero, y, plan.d.get(), y, plan.d.get(), &plan.algo, ctx.cublas.workspace(),
                     ctx.cublas.workspace_bytes(), stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    // The heuristic's algorithm refused these operands when run (it checks them before
    // launching anything): this shape takes the two-launch path from now on.
    static_cast<void>(cudaGetLastError());
    plan.fused = false;
    return false;
  }
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail_call("cublasLtMatmul(...)", status_text(status),
              detail::concat("linear_forward: cuBLASLt matmul with bias epilogue, ",
                             dtype_name(dtype), " batch=", batch, " in=", in, " out=", out));
  }
  return true;
}

}  // namespace

int linear_bias_epilogue_plans(Device device, bool fused) {
  BiasGemmCache& cache = bias_gemm_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  int count = 0;
  for (const auto& [key, plan] : cache.plans)
    count += std::get<0>(key) == device.index && plan->fused == fused;
  return count;
}

void add_column_sums(const void* dy, DType dtype, int rows, int columns, void* bias,
                     DType bias_dtype, cudaStream_t stream) {
  if (columns == 0) return;
  const int chunks = std::clamp((rows + kChunkRows - 1) / kChunkRows, 1, kMaxRowChunks);
  const int chunk_rows = std::max((rows + chunks - 1) / chunks, 1);
  const int used_chunks = std::max((rows + chunk_rows - 1) / chunk_rows, 1);
  const DeviceBuffer partials =
      used_chunks > 1
          ? reduction_workspace(sizeof(float) * static_cast<std::size_t>(used_chunks) * columns)
          : DeviceBuffer();
  unsigned int* arrivals = used_chunks > 1 ? arrival_counter(ArrivalSlot::column_sums) : nullptr;
  const dim3 grid((columns + kTileColumns - 1) / kTileColumns,
                  static_cast<unsigned int>(used_chunks));
  dispatch_floating(dtype, "linear_backward", [&](auto type) {
    using T = decltype(type);
    ALLOY_LAUNCH(column_sums_kernel, grid, dim3(kTileColumns, kTileRows), 0, stream)
    (static_cast<const T*>(dy), rows, columns, chunk_rows, bias, bias_dtype, partials.as<float>(),
     arrivals);
  });
  ALLOY_CUDA_CHECK_LAUNCH("column_sums_kernel over ", rows, "x", columns, " in ", used_chunks,
                          " row chunks");
}

void linear_forward(cublasHandle_t handle, cudaStream_t stream, int batch, int in, int out,
                    const void* x, const void* w, const void* b, void* y, DType dtype) {
  // y[batch, out] = x[batch, in] w[out, in]^T + b
  if (batch > 0 && small_gemm_fits(batch, out, in)) {
    small_gemm({batch, out, in, false, true}, x, w, dtype, b, y, dtype, false, stream);
    return;
  }
  // A product of few outputs over many inputs wants k split over blocks. The bias epilogue's
  // plan does not split it: on LeNet's first forward (256 x 128 over 800 inputs) it ran about
  // three times as long as cuBLAS's own algorithms without the epilogue, which split k 12-14 ways.
  const bool splits_k = std::int64_t{batch} * out <= kSplitKOutputs && in > kSplitKInputs;
  if (b != nullptr && batch > 0 && out > 0 && in > 0 && !splits_k &&
      fused_bias_gemm(batch, in, out, x, w, b, y, dtype, stream)) {
    return;
  }
  float beta = 0.0f;
  if (b != nullptr && batch > 0) {
    const unsigned int column_blocks = (out + kThreads - 1) / kThreads;
    const unsigned int row_blocks = std::clamp<unsigned int>(
        grid_for(std::int64_t{batch} * out) / column_blocks, 1, std::min(batch, 65535));
    dispatch_floating(dtype, "linear_forward", [&](auto type) {
      using T = decltype(type);
      ALLOY_LAUNCH(broadcast_rows_kernel, dim3(column_blocks, row_blocks), kThreads, 0, stream)
      (static_cast<const T*>(b), static_cast<T*>(y), batch, out);
    });
    ALLOY_CUDA_CHECK_LAUNCH("broadcast_rows_kernel for a [", batch, ", ", out, "] bias");
    beta = 1.0f;
  }
  // y[batch, out] = x[batch, in] w[out, in]^T
  gemm(handle, false, true, batch, out, in, 1.0f, x, in, w, in, dtype, beta, y, out, dtype);
}

void linear_backward(cublasHandle_t handle, cudaStream_t stream, int batch, int in, int out,
                     const void* x, const void* w, const void* dy, DType dtype, void* dw,
                     DType dw_dtype, void* db, DType db_dtype, void* dx) {
  // dw[out, in] += dy[batch, out]^T x[batch, in]
  if (small_gemm_fits(out, in, batch)) {
    small_gemm({out, in, batch, true, false}, dy, x, dtype, nullptr, dw, dw_dtype, true, stream);
  } else {
    gemm(handle, true, false, out, in, batch, 1.0f, dy, out, x, in, dtype, 1.0f, dw, in, dw_dtype);
  }
  if (db != nullptr) add_column_sums(dy, dtype, batch, out, db, db_dtype, stream);
  // dx[batch, in] = dy[batch, out] w[out, in]
  if (dx != nullptr && small_gemm_fits(batch, in, out)) {
    small_gemm({batch, in, out, false, false}, dy, w, dtype, nullptr, dx, dtype, false, stream);
  } else if (dx != nullptr) {
    gemm(handle, false, false, batch, in, out, 1.0f, dy, out, w, in, dtype, 0.0f, dx, in, dtype);
  }
}

}  // namespace alloy::cuda
