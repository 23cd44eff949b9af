// Emulated cuBLAS: handles (stream, workspace, math and pointer modes) and cublasGemmEx with the
// documented column-major semantics C = alpha op(A) op(B) + beta C, argument checks and statuses.
// The product runs as stream work (emulator.h); host scalars are read at the call.
#include <cublas_v2.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "tools/cuda_emulator/emulator.h"
#include "tools/cuda_emulator/host_gemm.h"
#include "tools/cuda_emulator/host_math.h"
#include "tools/cuda_emulator/precisions.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;  // null: the library's own pool
  std::size_t workspace_bytes = 0;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace {

using alloy::emulator::Accumulation;
using alloy::emulator::GemmOperand;
using alloy::emulator::InputRounding;

bool valid_operation(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

bool valid_math_mode(int mode) {
  const int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  return base == CUBLAS_DEFAULT_MATH || base == CUBLAS_TENSOR_OP_MATH ||
         base == CUBLAS_PEDANTIC_MATH || base == CUBLAS_TF32_TENSOR_OP_MATH ||
         base == CUBLAS_FP32_EMULATED_BF16X9_MATH || base == CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH;
}

// What cublasGemmEx computes for a compute type and (A, B, C) types, per the cuBLAS
// documentation's table of supported combinations (the real-valued floating ones).
struct GemmKind {
  bool supported = false;
  bool half_compute = false;  // CUBLAS_COMPUTE_16F: half scale type and accumulation
  InputRounding rounding = InputRounding::none;
};

GemmKind gemm_kind(cublasComputeType_t compute, cudaDataType_t a, cudaDataType_t b,
                   cudaDataType_t c, int math_mode) {
  GemmKind kind;
  if (a != b) return kind;
  const int base_math = math_mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  switch (compute) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      kind.supported = a == CUDA_R_16F && c == CUDA_R_16F;
      kind.half_compute = true;
      return kind;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      kind.supported = (a == CUDA_R_32F && c == CUDA_R_32F) ||
                       ((a == CUDA_R_16F || a == CUDA_R_16BF) && (c == a || c == CUDA_R_32F));
      // The TF32 math mode lets fp32 GEMMs of the default compute type use TF32 tensor cores.
      if (compute == CUBLAS_COMPUTE_32F && a == CUDA_R_32F &&
          base_math == CUBLAS_TF32_TENSOR_OP_MATH)
        kind.rounding = InputRounding::tf32;
      return kind;
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      // Down-converting fp32 inputs is what these compute types allow, so do it.
      kind.supported = a == CUDA_R_32F && c == CUDA_R_32F;
      kind.rounding = compute == CUBLAS_COMPUTE_32F_FAST_16F    ? InputRounding::f16
                      : compute == CUBLAS_COMPUTE_32F_FAST_16BF ? InputRounding::bf16
                                                                : InputRounding::tf32;
      return kind;
    default:
      return kind;
  }
}

bool valid_algo(cublasGemmAlgo_t algo) {
  return algo == CUBLAS_GEMM_DEFAULT || (algo >= CUBLAS_GEMM_ALGO0 && algo <= CUBLAS_GEMM_ALGO23) ||
         algo == CUBLAS_GEMM_DEFAULT_TENSOR_OP ||
         (algo >= CUBLAS_GEMM_ALGO0_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP);
}

// A scalar of the scale type (fp32, or half for CUBLAS_COMPUTE_16F) as fp32.
float read_scalar(const void* pointer, bool half) {
  return half ? __half2float(*static_cast<const __half*>(pointer))
              : *static_cast<const float*>(pointer);
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  // Queued work holds copies of what it needs, never the handle.
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  // As documented: setting the stream resets the workspace to the library's default pool.
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  // The documented requirement: a user workspace is aligned to at least 256 bytes.
  if (reinterpret_cast<std::uintptr_t>(workspace) % 256 != 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace == nullptr && bytes > 0) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = bytes > 0 ? workspace : nullptr;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_math_mode(mode)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  // The documented INVALID_VALUE conditions.
  if (!valid_operation(transa) || !valid_operation(transb) || m < 0 || n < 0 || k < 0 ||
      lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m) ||
      alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const GemmKind kind = gemm_kind(computeType, Atype, Btype, Ctype, handle->math_mode);
  if (!kind.supported || !valid_algo(algo)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;

  const bool device_scalars = handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  const std::size_t scalar_bytes = kind.half_compute ? 2 : 4;
  float alpha_value = 0.0f, beta_value = 0.0f;
  if (!device_scalars) {
    // A device pointer read from the host would crash a real process: say so instead.
    if (alloy::emulator::is_device_range(alpha, scalar_bytes) ||
        alloy::emulator::is_device_range(beta, scalar_bytes)) {
      std::fprintf(stderr,
                   "cuda emulator: cublasGemmEx in CUBLAS_POINTER_MODE_HOST was given alpha or "
                   "beta in device memory\n");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    alpha_value = read_scalar(alpha, kind.half_compute);
    beta_value = read_scalar(beta, kind.half_compute);
  }

  const GemmOperand a{A, Atype, lda, ta}, b{B, Btype, ldb, tb};
  const std::size_t a_bytes = alloy::emulator::matrix_bytes(ta ? k : m, ta ? m : k, lda,
                                                            alloy::emulator::element_size(Atype));
  const std::size_t b_bytes = alloy::emulator::matrix_bytes(tb ? n : k, tb ? k : n, ldb,
                                                            alloy::emulator::element_size(Btype));
  const std::size_t c_bytes =
      alloy::emulator::matrix_bytes(m, n, ldc, alloy::emulator::element_size(Ctype));
  const void* workspace = handle->workspace;
  const std::size_t workspace_bytes = handle->workspace_bytes;
  Accumulation how;
  how.rounding = kind.rounding;
  how.half = kind.half_compute;
  if (Atype == CUDA_R_32F) alloy::emulator::note_fp32_gemm(computeType);

  alloy::emulator::Work work{
      "cublasGemmEx", [=] {
        float alpha_now = alpha_value, beta_now = beta_value;
        if (device_scalars) {
          alloy::emulator::require_device_range(alpha, scalar_bytes, "cublasGemmEx alpha");
          alloy::emulator::require_device_range(beta, scalar_bytes, "cublasGemmEx beta");
          alpha_now = read_scalar(alpha, kind.half_compute);
          beta_now = read_scalar(beta, kind.half_compute);
        }
        if (workspace != nullptr)
          alloy::emulator::require_device_range(workspace, workspace_bytes,
                                                "cublasGemmEx workspace");
        alloy::emulator::require_device_range(C, c_bytes, "cublasGemmEx C");
        // BLAS: with alpha = 0 or k = 0 A and B are not read; with beta = 0 C is not read.
        const bool products_needed = alpha_now != 0.0f && k > 0;
        if (!products_needed && beta_now == 1.0f) return;
        std::vector<float> products;
        if (products_needed) {
          alloy::emulator::require_device_range(A, a_bytes, "cublasGemmEx A");
          alloy::emulator::require_device_range(B, b_bytes, "cublasGemmEx B");
          products = alloy::emulator::gemm_products(a, b, m, n, k, how);
        }
        for (std::int64_t j = 0; j < n; ++j) {
          for (std::int64_t i = 0; i < m; ++i) {
            const auto at = static_cast<std::size_t>(i + j * std::int64_t{ldc});
            float value =
                products_needed ? alpha_now * products[static_cast<std::size_t>(i + j * m)] : 0.0f;
            if (beta_now != 0.0f) value += beta_now * alloy::emulator::load_element(C, Ctype, at);
            alloy::emulator::store_element(C, Ctype, at, value);
          }
        }
      }};
  return alloy::emulator::enqueue(handle->stream, std::move(work)) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "error detected trying to check the license";
  }
  return "unknown error";
}

}  // extern "C"
