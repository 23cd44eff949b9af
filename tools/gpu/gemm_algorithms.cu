// How fast cuBLAS runs the three GEMMs of Alloy's linear layers (core/ops/cuda/linear.cu) for the
// shapes its models use, and which of cuBLASLt's algorithms would be faster: per layer shape and
// GEMM it times cublasGemmEx's default (what core/ops/cuda/gemm.cu calls) and each algorithm
// cuBLASLt's heuristic offers (up to 16, fp32 compute, split-k sums in fp32 as Alloy asks), and
// prints one line each with the algorithm's tile, split-k count, reduction scheme and waves;
// where core/ops/cuda/small_gemm.h takes the product (and so Alloy runs it), its time too.
// A measurement tool for a GPU machine, not a test.
//
//   gemm_algorithms
//
// Times: the best of kRounds event-timed rounds of kCalls calls, per call, in microseconds,
// after one warm-up call; operands are zero (the time does not depend on the values).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/ops/cuda/small_gemm.h"
#include "tools/gpu/probe_support.h"

namespace {

constexpr int kRounds = 5;
constexpr int kCalls = 20;
constexpr int kAlgorithms = 16;
constexpr std::size_t kWorkspace = std::size_t{32} << 20;

using alloy::probe::Buffer;
using alloy::probe::check;
using alloy::probe::device_buffer;
using alloy::probe::Owned;

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(status));
}

// Microseconds a call of `run` takes: the best of kRounds rounds of kCalls calls.
template <class Run>
float time_us(const Run& run) {
  return 1000.0f * alloy::probe::best_time_ms(run, kRounds, kCalls);
}

// A row-major c[m, n] = alpha op(a)[m, k] op(b)[k, n] + beta c, as core/ops/cuda/gemm.cu states it.
struct Gemm {
  const char* name;
  bool transpose_a, transpose_b;
  int m, n, k, lda, ldb, ldc;
  float beta;
};

template <class Value>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, Value value) {
  check(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value), "matmul attribute");
}

template <class Value>
Value config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attribute) {
  Value value{};
  std::size_t written = 0;
  check(cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof value, &written),
        "algorithm attribute");
  return value;
}

void measure(cublasHandle_t blas, cublasLtHandle_t lt, const char* layer, const Gemm& g) {
  const Buffer a = device_buffer(sizeof(float) * g.m * g.k);
  const Buffer b = device_buffer(sizeof(float) * g.k * g.n);
  const Buffer c = device_buffer(sizeof(float) * g.m * g.n);
  const Buffer workspace = device_buffer(kWorkspace);
  const float alpha = 1.0f, beta = g.beta;
  // Column-major: c^T[n, m] = op(b)^T op(a)^T, the operands swapped (as gemm.cu does).
  const cublasOperation_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float default_us = time_us([&] {
    check(cublasGemmEx(blas, op_b, op_a, g.n, g.m, g.k, &alpha, b.get(), CUDA_R_32F, g.ldb, a.get(),
                       CUDA_R_32F, g.lda, &beta, c.get(), CUDA_R_32F, g.ldc, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
  });
  std::printf("%-22s %-6s m=%-5d n=%-5d k=%-5d | cublasGemmEx default %8.2f us\n", layer, g.name,
              g.m, g.n, g.k, default_us);
  if (alloy::cuda::small_gemm_fits(g.m, g.n, g.k)) {
    // What linear.cu runs instead where it fits (row-major, so the leading dimensions are implied).
    const float small_us = time_us([&] {
      alloy::cuda::small_gemm({g.m, g.n, g.k, g.transpose_a, g.transpose_b}, a.get(), b.get(),
                              alloy::DType::f32, nullptr, c.get(), alloy::DType::f32,
                              g.beta != 0.0f, nullptr);
    });
    std::printf("%-22s %-6s   small_gemm (Alloy's, what runs): %8.2f us\n", layer, g.name,
                small_us);
  }

  Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  check(cublasLtMatmulDescCreate(&desc.raw, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  set(desc.raw, CUBLASLT_MATMUL_DESC_TRANSA, op_b);
  set(desc.raw, CUBLASLT_MATMUL_DESC_TRANSB, op_a);
  Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> la, lb, lc;
  // Stored column-major shapes: op N keeps [rows, cols] of the product's operand, op T swaps.
  check(cublasLtMatrixLayoutCreate(&la.raw, CUDA_R_32F, g.transpose_b ? g.k : g.n,
                                   g.transpose_b ? g.n : g.k, g.ldb),
        "layout");
  check(cublasLtMatrixLayoutCreate(&lb.raw, CUDA_R_32F, g.transpose_a ? g.m : g.k,
                                   g.transpose_a ? g.k : g.m, g.lda),
        "layout");
  check(cublasLtMatrixLayoutCreate(&lc.raw, CUDA_R_32F, g.n, g.m, g.ldc), "layout");
  Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> preference;
  check(cublasLtMatmulPreferenceCreate(&preference.raw), "preference");
  const auto workspace_bytes = static_cast<std::uint64_t>(kWorkspace);
  check(
      cublasLtMatmulPreferenceSetAttribute(preference.raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof workspace_bytes),
      "preference workspace");
  const auto reduction = static_cast<std::uint32_t>(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
  check(
      cublasLtMatmulPreferenceSetAttribute(
          preference.raw, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof reduction),
      "preference reduction");
  cublasLtMatmulHeuristicResult_t results[kAlgorithms] = {};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(lt, desc.raw, la.raw, lb.raw, lc.raw, lc.raw, preference.raw,
                                       kAlgorithms, results, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  for (int i = 0; i < found; ++i) {
    const cublasLtMatmulAlgo_t& algo = results[i].algo;
    float us = -1.0f;
    if (results[i].state == CUBLAS_STATUS_SUCCESS) {
      us = time_us([&] {
        check(cublasLtMatmul(lt, desc.raw, &alpha, b.get(), la.raw, a.get(), lb.raw, &beta, c.get(),
                             lc.raw, c.get(), lc.raw, &algo, workspace.get(), kWorkspace, nullptr),
              "cublasLtMatmul");
      });
    }
    std::printf(
        "%-22s %-6s   lt #%-2d id %-3d tile %-3u splitk %-3u reduction %u waves %.2f "
        "workspace %zu: %8.2f us\n",
        layer, g.name, i, config<int>(algo, CUBLASLT_ALGO_CONFIG_ID),
        config<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
        config<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        config<std::uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), results[i].wavesCount,
        results[i].workspaceSize, us);
  }
}

struct Layer {
  const char* name;
  int batch, in, out;
};

}  // namespace

int main() {
  try {
    Owned<cublasHandle_t, cublasDestroy> blas;
    check(cublasCreate(&blas.raw), "cublasCreate");
    // As core/cuda/handles.cpp sets Alloy's handle: fp32 split-k sums, a workspace of its own.
    check(cublasSetMathMode(blas.raw, static_cast<cublasMath_t>(
                                          CUBLAS_DEFAULT_MATH |
                                          CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
          "cublasSetMathMode");
    const Buffer blas_workspace = device_buffer(kWorkspace);
    check(cublasSetWorkspace(blas.raw, blas_workspace.get(), kWorkspace), "cublasSetWorkspace");
    Owned<cublasLtHandle_t, cublasLtDestroy> lt;
    check(cublasLtCreate(&lt.raw), "cublasLtCreate");
    const Layer layers[] = {{"lenet fc1 800->128", 256, 800, 128},
                            {"lenet fc2 128->10", 256, 128, 10},
                            {"resnet18 fc 512->10", 256, 512, 10},
                            {"ffn 1024->4096", 256, 1024, 4096}};
    for (const Layer& l : layers) {
      // core/ops/cuda/linear.cu: y = x w^T, dw += dy^T x, dx = dy w.
      measure(blas.raw, lt.raw, l.name,
              {"y", false, true, l.batch, l.out, l.in, l.in, l.in, l.out, 0.0f});
      measure(blas.raw, lt.raw, l.name,
              {"dw", true, false, l.out, l.in, l.batch, l.out, l.in, l.in, 1.0f});
      measure(blas.raw, lt.raw, l.name,
              {"dx", false, false, l.batch, l.in, l.out, l.out, l.in, l.in, 0.0f});
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gemm_algorithms: %s\n", error.what());
    return 1;
  }
  return 0;
}
