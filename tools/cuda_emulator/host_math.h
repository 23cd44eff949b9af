// The arithmetic the emulated libraries share (cuBLAS, cuBLASLt, cuDNN, NCCL): loads and stores
// of f32/f16/bf16 elements, rounding into a storage or reduced compute type, the packing and
// half accumulation of the GEMMs that have no BLAS (host_gemm.h has the others).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace alloy::emulator {

// Bytes of one element of the floating types the emulated libraries compute on; 0 for others.
inline std::size_t element_size(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;
  }
}

inline float load_element(const void* base, cudaDataType_t type, std::size_t index) {
  switch (type) {
    case CUDA_R_16F:
      return __half2float(static_cast<const __half*>(base)[index]);
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
    default:
      return static_cast<const float*>(base)[index];
  }
}

// Rounds `value` to nearest-even into `type`: the one rounding of a result into its output.
inline void store_element(void* base, cudaDataType_t type, std::size_t index, float value) {
  switch (type) {
    case CUDA_R_16F:
      static_cast<__half*>(base)[index] = __float2half_rn(value);
      break;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16_rn(value);
      break;
    default:
      static_cast<float*>(base)[index] = value;
  }
}

// `value` rounded to TF32 (fp32 with a 10-bit mantissa, nearest-even), as tensor cores read
// fp32 inputs when a TF32 mode allows it. Infinities and NaNs pass unchanged.
inline float round_to_tf32(float value) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u) return value;
  bits += 0xfffu + ((bits >> 13) & 1u);
  bits &= ~0x1fffu;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// How GEMM inputs are read into the fp32 compute type: unchanged, or first rounded to a
// narrower type (the FAST compute types and the TF32 math mode let a GPU do that).
enum class InputRounding { none, tf32, f16, bf16 };

inline float round_input(float value, InputRounding rounding) {
  switch (rounding) {
    case InputRounding::tf32:
      return round_to_tf32(value);
    case InputRounding::f16:
      return __half2float(__float2half_rn(value));
    case InputRounding::bf16:
      return __bfloat162float(__float2bfloat16_rn(value));
    default:
      return value;
  }
}

// op(X) of a column-major matrix X (leading dimension `ld`) as a row-major rows x depth fp32
// array: row r, column p is X[r + p * ld], or X[p + r * ld] when `transposed`. Packing op(A)
// (m x k) and op(B)^T (n x k, i.e. B packed with the opposite transpose) makes every output
// element a dot product of two contiguous rows.
inline std::vector<float> pack_rows(const void* x, cudaDataType_t type, std::int64_t ld,
                                    bool transposed, std::int64_t rows, std::int64_t depth,
                                    InputRounding rounding) {
  std::vector<float> packed(static_cast<std::size_t>(rows * depth));
  if (transposed) {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t p = 0; p < depth; ++p) {
        packed[static_cast<std::size_t>(r * depth + p)] =
            round_input(load_element(x, type, static_cast<std::size_t>(p + r * ld)), rounding);
      }
    }
  } else {
    // Reads X column by column (contiguous), writes strided.
    for (std::int64_t p = 0; p < depth; ++p) {
      for (std::int64_t r = 0; r < rows; ++r) {
        packed[static_cast<std::size_t>(r * depth + p)] =
            round_input(load_element(x, type, static_cast<std::size_t>(r + p * ld)), rounding);
      }
    }
  }
  return packed;
}

// The sum of a[p] * b[p] over [0, depth) accumulated in half precision, each step a half fused
// multiply-add rounded to half, as CUBLAS_COMPUTE_16F specifies.
inline float dot_half(const float* a, const float* b, std::int64_t depth) {
  __half sum = __float2half_rn(0.0f);
  for (std::int64_t p = 0; p < depth; ++p) {
    // Exact in double (a half product has 22 significant bits), so one rounding, as in an FMA.
    const double product = static_cast<double>(__half2float(__float2half_rn(a[p]))) *
                           static_cast<double>(__half2float(__float2half_rn(b[p])));
    sum = __double2half(product + static_cast<double>(__half2float(sum)));
  }
  return __half2float(sum);
}

// Bytes that a column-major rows x columns matrix with leading dimension `ld` spans: the extent
// a library call reads or writes (0 for an empty matrix).
inline std::size_t matrix_bytes(std::int64_t rows, std::int64_t columns, std::int64_t ld,
                                std::size_t element) {
  if (rows <= 0 || columns <= 0) return 0;
  return static_cast<std::size_t>((columns - 1) * ld + rows) * element;
}

}  // namespace alloy::emulator
