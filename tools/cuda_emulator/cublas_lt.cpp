// Emulated cuBLASLt: matmul descriptors, matrix layouts, preferences, the algorithm heuristic and
// cublasLtMatmul with the documented semantics D = epilogue(alpha op(A) op(B) + beta C) for the
// epilogues DEFAULT, RELU, BIAS, RELU_BIAS, BGRADA and BGRADB. Two algorithms exist: a split-k
// one (its fp32 partial sums in the workspace, so it needs one) and a plain one without
// workspace; pointers less aligned than the heuristic was told are refused as on a GPU.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tools/cuda_emulator/emulator.h"
#include "tools/cuda_emulator/host_gemm.h"
#include "tools/cuda_emulator/host_math.h"
#include "tools/cuda_emulator/precisions.h"

struct cublasLtContext {};

namespace {

using alloy::emulator::Accumulation;
using alloy::emulator::GemmOperand;
using alloy::emulator::InputRounding;

// The states behind the semi-opaque descriptors, kept in their `data` arrays. `magic` tells a
// descriptor made here from uninitialised memory.
constexpr std::uint32_t kMagic = 0x4c54454d;  // "LTEM"

struct DescState {
  std::uint32_t magic;
  std::int32_t compute, scale, pointer_mode, transa, transb, transc;
  std::uint32_t epilogue;
  const void* bias;
  std::int32_t bias_type;  // -1: D's type
  std::int64_t bias_batch_stride;
};

struct LayoutState {
  std::uint32_t magic;
  std::int32_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
};

struct PreferenceState {
  std::uint32_t magic;
  std::uint32_t search_mode;
  std::uint64_t max_workspace;
  std::uint32_t reduction_mask;
  std::uint32_t alignment[4];  // A, B, C, D
};

struct AlgoState {
  std::uint32_t magic;
  std::int32_t split_k;  // 2: split-k over the workspace, 1: plain
  std::uint64_t workspace;
  std::uint32_t alignment;       // that A, B, C and D were promised
  std::uint32_t bias_alignment;  // of the bias pointer the heuristic saw
};

static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(PreferenceState) <= sizeof(cublasLtMatmulPreferenceOpaque_t));
static_assert(sizeof(AlgoState) <= sizeof(cublasLtMatmulAlgo_t));

template <class State, class Opaque>
State load(const Opaque* opaque) {
  State state;
  std::memcpy(&state, opaque->data, sizeof state);
  return state;
}

template <class State, class Opaque>
void save(Opaque* opaque, const State& state) {
  std::memcpy(opaque->data, &state, sizeof state);
}

std::uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

bool supported_epilogue(std::uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_DEFAULT || epilogue == CUBLASLT_EPILOGUE_RELU ||
         epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_BGRADA || epilogue == CUBLASLT_EPILOGUE_BGRADB;
}

bool bias_gradient(std::uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_BGRADA || epilogue == CUBLASLT_EPILOGUE_BGRADB;
}

// One matmul's shape and types, checked as cuBLASLt documents.
struct Problem {
  std::int64_t m, n, k;
  bool ta, tb;
  cudaDataType_t ab, c, d, bias;
  bool half_scale;
  Accumulation how;
  std::uint32_t epilogue;
};

cublasStatus_t check(const DescState& desc, const LayoutState* a, const LayoutState* b,
                     const LayoutState* c, const LayoutState* d, Problem* p) {
  for (const LayoutState* layout : {a, b, c, d}) {
    if (layout->magic != kMagic || layout->ld < std::max<std::int64_t>(1, layout->rows))
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  p->ta = desc.transa != CUBLAS_OP_N;
  p->tb = desc.transb != CUBLAS_OP_N;
  p->m = static_cast<std::int64_t>(p->ta ? a->cols : a->rows);
  p->k = static_cast<std::int64_t>(p->ta ? a->rows : a->cols);
  p->n = static_cast<std::int64_t>(p->tb ? b->rows : b->cols);
  const auto kb = static_cast<std::int64_t>(p->tb ? b->cols : b->rows);
  if (kb != p->k || static_cast<std::int64_t>(d->rows) != p->m ||
      static_cast<std::int64_t>(d->cols) != p->n || c->rows != d->rows || c->cols != d->cols) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (desc.transc != CUBLAS_OP_N || !supported_epilogue(desc.epilogue))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  p->ab = static_cast<cudaDataType_t>(a->type);
  p->c = static_cast<cudaDataType_t>(c->type);
  p->d = static_cast<cudaDataType_t>(d->type);
  p->epilogue = desc.epilogue;
  p->bias = desc.bias_type < 0 ? p->d : static_cast<cudaDataType_t>(desc.bias_type);
  if (b->type != a->type || p->c != p->d || p->bias != p->d) return CUBLAS_STATUS_NOT_SUPPORTED;
  p->how = Accumulation{};
  p->half_scale = false;
  switch (desc.compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      if (desc.scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
      if (!((p->ab == CUDA_R_32F && p->d == CUDA_R_32F) ||
            ((p->ab == CUDA_R_16F || p->ab == CUDA_R_16BF) &&
             (p->d == p->ab || p->d == CUDA_R_32F)))) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
      }
      return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      if (desc.scale != CUDA_R_32F || p->ab != CUDA_R_32F || p->d != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
      p->how.rounding = desc.compute == CUBLAS_COMPUTE_32F_FAST_16F    ? InputRounding::f16
                        : desc.compute == CUBLAS_COMPUTE_32F_FAST_16BF ? InputRounding::bf16
                                                                       : InputRounding::tf32;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      if (desc.scale != CUDA_R_16F || p->ab != CUDA_R_16F || p->d != CUDA_R_16F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
      p->how.half = true;
      p->half_scale = true;
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

// The algorithms for a problem under a preference, fastest first.
std::vector<AlgoState> algorithms(const Problem& p, const PreferenceState& pref,
                                  std::uint32_t bias_alignment) {
  std::vector<AlgoState> out;
  std::uint32_t alignment = 256;
  for (const std::uint32_t a : pref.alignment)
    alignment = std::min(alignment, a);
  const std::size_t element =
      std::max(alloy::emulator::element_size(p.ab), alloy::emulator::element_size(p.d));
  if (alignment < element) return out;  // no kernel reads elements split across addresses
  const std::uint64_t split_bytes = 2 * sizeof(float) * static_cast<std::uint64_t>(p.m * p.n);
  if (p.k >= 2 && !p.how.half && !bias_gradient(p.epilogue) &&
      (pref.reduction_mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) != 0 &&
      split_bytes <= pref.max_workspace) {
    out.push_back({kMagic, 2, split_bytes, alignment, bias_alignment});
  }
  out.push_back({kMagic, 1, 0, alignment, bias_alignment});
  return out;
}

PreferenceState default_preference() {
  return {kMagic, 0, 0, CUBLASLT_REDUCTION_SCHEME_MASK, {256, 256, 256, 256}};
}

float read_scalar(const void* pointer, bool half) {
  return half ? __half2float(*static_cast<const __half*>(pointer))
              : *static_cast<const float*>(pointer);
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new cublasLtMatmulDescOpaque_t{};
  save(*desc, DescState{kMagic, compute, scale, CUBLASLT_POINTER_MODE_HOST, CUBLAS_OP_N,
                        CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, -1, 0});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buffer, size_t bytes) {
  if (desc == nullptr || buffer == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  DescState state = load<DescState>(desc);
  // The documented size of each attribute; a mismatch is INVALID_VALUE.
  const auto take = [&](auto& field) {
    if (bytes != sizeof field) return false;
    std::memcpy(&field, buffer, sizeof field);
    return true;
  };
  bool ok = false;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      ok = take(state.compute);
      break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      ok = take(state.scale);
      break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      ok = take(state.pointer_mode);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = take(state.transa) && state.transa >= CUBLAS_OP_N && state.transa <= CUBLAS_OP_C;
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = take(state.transb) && state.transb >= CUBLAS_OP_N && state.transb <= CUBLAS_OP_C;
      break;
    case CUBLASLT_MATMUL_DESC_TRANSC:
      ok = take(state.transc);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      ok = take(state.epilogue);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      ok = take(state.bias);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      ok = take(state.bias_type);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      ok = take(state.bias_batch_stride);
      break;
    default:
      break;  // attributes the emulator does not model
  }
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
  save(desc, state);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{};
  save(*layout, LayoutState{kMagic, type, rows, cols, ld});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  if (preference == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *preference = new cublasLtMatmulPreferenceOpaque_t{};
  save(*preference, default_preference());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete preference;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* buffer, size_t bytes) {
  if (preference == nullptr || buffer == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  PreferenceState state = load<PreferenceState>(preference);
  const auto take = [&](auto& field) {
    if (bytes != sizeof field) return false;
    std::memcpy(&field, buffer, sizeof field);
    return true;
  };
  bool ok = false;
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      ok = take(state.search_mode);
      break;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      ok = take(state.max_workspace);
      break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      ok = take(state.reduction_mask);
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      ok = take(state.alignment[attribute - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES]);
      break;
    default:
      break;
  }
  if (!ok) return CUBLAS_STATUS_INVALID_VALUE;
  save(preference, state);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr ||
      preference == nullptr || requested < 1 || results == nullptr || returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returned = 0;
  const DescState state = load<DescState>(desc);
  const LayoutState la = load<LayoutState>(a), lb = load<LayoutState>(b), lc = load<LayoutState>(c),
                    ld = load<LayoutState>(d);
  Problem problem{};
  if (const cublasStatus_t status = check(state, &la, &lb, &lc, &ld, &problem);
      status != CUBLAS_STATUS_SUCCESS)
    return status;
  const auto found = algorithms(problem, load<PreferenceState>(preference),
                                state.bias == nullptr ? 256 : alignment_of(state.bias));
  for (const AlgoState& algo : found) {
    if (*returned >= requested) break;
    cublasLtMatmulHeuristicResult_t& result = results[(*returned)++];
    result = cublasLtMatmulHeuristicResult_t{};
    save(&result.algo, algo);
    result.workspaceSize = algo.workspace;
    result.state = CUBLAS_STATUS_SUCCESS;
    result.wavesCount = 1.0f;
  }
  return *returned > 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr ||
      alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const DescState state = load<DescState>(desc);
  const LayoutState la = load<LayoutState>(a), lb = load<LayoutState>(b), lc = load<LayoutState>(c),
                    ld = load<LayoutState>(d);
  Problem p{};
  if (const cublasStatus_t status = check(state, &la, &lb, &lc, &ld, &p);
      status != CUBLAS_STATUS_SUCCESS)
    return status;
  if (state.pointer_mode != CUBLASLT_POINTER_MODE_HOST &&
      state.pointer_mode != CUBLASLT_POINTER_MODE_DEVICE) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  // In place, C and D must be described alike.
  if (C == D && (lc.ld != ld.ld || lc.type != ld.type)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool uses_bias =
      p.epilogue != CUBLASLT_EPILOGUE_DEFAULT && p.epilogue != CUBLASLT_EPILOGUE_RELU;
  if (uses_bias && state.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;

  // No algorithm given: an implicit heuristic query with the default preference.
  AlgoState chosen{};
  if (algo == nullptr) {
    chosen = algorithms(p, default_preference(), 256).front();
  } else {
    chosen = load<AlgoState>(algo);
    if (chosen.magic != kMagic) return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (workspace_bytes < chosen.workspace || (chosen.workspace > 0 && workspace == nullptr))
    return CUBLAS_STATUS_INVALID_VALUE;
  // The kernel was chosen for the alignment the heuristic was promised.
  for (const void* pointer : {A, B, C, static_cast<const void*>(D)}) {
    if (alignment_of(pointer) < chosen.alignment) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (uses_bias && alignment_of(state.bias) < std::min<std::uint32_t>(chosen.bias_alignment, 16))
    return CUBLAS_STATUS_NOT_SUPPORTED;

  const bool device_scalars = state.pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  const std::size_t scalar_bytes = p.half_scale ? 2 : 4;
  const float alpha_value = device_scalars ? 0.0f : read_scalar(alpha, p.half_scale);
  const float beta_value = device_scalars ? 0.0f : read_scalar(beta, p.half_scale);
  const std::size_t ab_element = alloy::emulator::element_size(p.ab);
  const std::size_t d_element = alloy::emulator::element_size(p.d);
  const std::size_t a_bytes = alloy::emulator::matrix_bytes(
      static_cast<std::int64_t>(la.rows), static_cast<std::int64_t>(la.cols), la.ld, ab_element);
  const std::size_t b_bytes = alloy::emulator::matrix_bytes(
      static_cast<std::int64_t>(lb.rows), static_cast<std::int64_t>(lb.cols), lb.ld, ab_element);
  const std::size_t c_bytes = alloy::emulator::matrix_bytes(p.m, p.n, lc.ld, d_element);
  const std::size_t d_bytes = alloy::emulator::matrix_bytes(p.m, p.n, ld.ld, d_element);
  const std::int64_t bias_length = p.epilogue == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m;
  const std::size_t bias_bytes = static_cast<std::size_t>(bias_length) * d_element;
  const void* bias = state.bias;
  const std::int64_t ldc = lc.ld, ldd = ld.ld;
  Accumulation how = p.how;
  how.k_splits = chosen.split_k;
  if (p.ab == CUDA_R_32F) alloy::emulator::note_fp32_gemm(state.compute);
  const std::uint64_t needed = chosen.workspace;

  alloy::emulator::Work work{
      "cublasLtMatmul", [=] {
        using alloy::emulator::require_device_range;
        float alpha_now = alpha_value, beta_now = beta_value;
        if (device_scalars) {
          require_device_range(alpha, scalar_bytes, "cublasLtMatmul alpha");
          require_device_range(beta, scalar_bytes, "cublasLtMatmul beta");
          alpha_now = read_scalar(alpha, p.half_scale);
          beta_now = read_scalar(beta, p.half_scale);
        }
        if (needed > 0) require_device_range(workspace, needed, "cublasLtMatmul workspace");
        require_device_range(A, a_bytes, "cublasLtMatmul A");
        require_device_range(B, b_bytes, "cublasLtMatmul B");
        if (beta_now != 0.0f) require_device_range(C, c_bytes, "cublasLtMatmul C");
        require_device_range(D, d_bytes, "cublasLtMatmul D");
        if (uses_bias) require_device_range(bias, bias_bytes, "cublasLtMatmul bias");

        const GemmOperand ga{A, p.ab, static_cast<std::int64_t>(la.ld), p.ta};
        const GemmOperand gb{B, p.ab, static_cast<std::int64_t>(lb.ld), p.tb};
        const std::vector<float> products =
            alloy::emulator::gemm_products(ga, gb, p.m, p.n, p.k, how);
        const bool add_bias =
            p.epilogue == CUBLASLT_EPILOGUE_BIAS || p.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
        const bool relu =
            p.epilogue == CUBLASLT_EPILOGUE_RELU || p.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
        // Bias gradients: the fp32 sums over k of op(A)'s rows (BGRADA) or op(B)'s columns
        // (BGRADB).
        std::vector<float> gradient;
        if (bias_gradient(p.epilogue)) {
          const bool of_a = p.epilogue == CUBLASLT_EPILOGUE_BGRADA;
          const GemmOperand& x = of_a ? ga : gb;
          // op(A) row i is A[i + p*lda] (N) or A[p + i*lda] (T); op(B) column j likewise with the
          // transpose flipped.
          const bool transposed = of_a ? x.transposed : !x.transposed;
          const auto rows = alloy::emulator::pack_rows(x.data, x.type, x.ld, transposed,
                                                       bias_length, p.k, how.rounding);
          gradient.resize(static_cast<std::size_t>(bias_length));
          for (std::int64_t i = 0; i < bias_length; ++i) {
            float sum = 0.0f;
            for (std::int64_t q = 0; q < p.k; ++q)
              sum += rows[static_cast<std::size_t>(i * p.k + q)];
            gradient[static_cast<std::size_t>(i)] = sum;
          }
        }
        for (std::int64_t j = 0; j < p.n; ++j) {
          for (std::int64_t i = 0; i < p.m; ++i) {
            float value = alpha_now * products[static_cast<std::size_t>(i + j * p.m)];
            if (beta_now != 0.0f)
              value += beta_now *
                       alloy::emulator::load_element(C, p.c, static_cast<std::size_t>(i + j * ldc));
            if (add_bias)
              value += alloy::emulator::load_element(bias, p.bias, static_cast<std::size_t>(i));
            if (relu) value = std::max(value, 0.0f);
            alloy::emulator::store_element(D, p.d, static_cast<std::size_t>(i + j * ldd), value);
          }
        }
        for (std::size_t i = 0; i < gradient.size(); ++i)
          alloy::emulator::store_element(const_cast<void*>(bias), p.bias, i, gradient[i]);
      }};
  return alloy::emulator::enqueue(stream, std::move(work)) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  return cublasGetStatusName(status);
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  return cublasGetStatusString(status);
}

}  // extern "C"
