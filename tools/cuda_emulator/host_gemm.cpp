#include "tools/cuda_emulator/host_gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "core/ops/cpu/gemm_kernels.h"

namespace alloy::emulator {

namespace {

// c = op(a) op(b) + beta c over row-major matrices, on the calling thread only, as alloy's CPU
// kernels ask too: the work already runs on a host thread per stream, and one thread keeps
// every call's sums in one order.
void sgemm_row_major(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                     std::int64_t k, const float* a, std::int64_t lda, const float* b,
                     std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cpu::use_one_gemm_thread_here();
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                                          1.0f, a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success)
    throw std::runtime_error("oneDNN sgemm failed (status " + std::to_string(status) + ")");
}

// The same over column-major matrices: c^T = op(b)^T op(a)^T, row-major.
void sgemm_column_major(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                        std::int64_t k, const float* a, std::int64_t lda, const float* b,
                        std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  sgemm_row_major(transpose_b, transpose_a, n, m, k, b, ldb, a, lda, beta, c, ldc);
}

float widen(float value) {
  return value;
}
float widen(__half value) {
  return __half2float(value);
}
float widen(__nv_bfloat16 value) {
  return __bfloat162float(value);
}

// One column of a stored matrix into fp32, its type's switch hoisted out of the loop.
template <class T>
void widen_column(const T* in, std::int64_t rows, InputRounding rounding, float* out) {
  for (std::int64_t i = 0; i < rows; ++i)
    out[i] = round_input(widen(in[i]), rounding);
}

// A GEMM operand as fp32 that sgemm reads: fp32 data read unchanged is used in place; anything
// else is widened (and rounded) into a dense copy of the stored rows x columns matrix.
class Fp32Operand {
 public:
  Fp32Operand(const GemmOperand& x, std::int64_t rows, std::int64_t columns, InputRounding rounding)
      : external_(static_cast<const float*>(x.data)), ld_(x.ld) {
    if (x.type == CUDA_R_32F && rounding == InputRounding::none) return;
    copy_.resize(static_cast<std::size_t>(rows * columns));
    for (std::int64_t j = 0; j < columns; ++j) {
      float* out = copy_.data() + j * rows;
      const std::size_t at = static_cast<std::size_t>(j * x.ld);
      switch (x.type) {
        case CUDA_R_16F:
          widen_column(static_cast<const __half*>(x.data) + at, rows, rounding, out);
          break;
        case CUDA_R_16BF:
          widen_column(static_cast<const __nv_bfloat16*>(x.data) + at, rows, rounding, out);
          break;
        default:
          widen_column(static_cast<const float*>(x.data) + at, rows, rounding, out);
      }
    }
    ld_ = rows;
  }

  const float* data() const { return copy_.empty() ? external_ : copy_.data(); }
  std::int64_t ld() const { return ld_; }

 private:
  const float* external_;
  std::int64_t ld_;
  std::vector<float> copy_;
};

// CUBLAS_COMPUTE_16F: each output a dot product of two packed rows accumulated in half.
void half_products(const GemmOperand& a, const GemmOperand& b, std::int64_t m, std::int64_t n,
                   std::int64_t k, InputRounding rounding, std::vector<float>& products) {
  const std::vector<float> a_rows = pack_rows(a.data, a.type, a.ld, a.transposed, m, k, rounding);
  const std::vector<float> b_columns =
      pack_rows(b.data, b.type, b.ld, !b.transposed, n, k, rounding);
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t i = 0; i < m; ++i) {
      products[static_cast<std::size_t>(i + j * m)] =
          dot_half(a_rows.data() + i * k, b_columns.data() + j * k, k);
    }
  }
}

}  // namespace

std::vector<float> gemm_products(const GemmOperand& a, const GemmOperand& b, std::int64_t m,
                                 std::int64_t n, std::int64_t k, const Accumulation& how) {
  std::vector<float> products(static_cast<std::size_t>(m * n), 0.0f);
  if (m == 0 || n == 0 || k == 0) return products;
  if (how.half) {
    half_products(a, b, m, n, k, how.rounding, products);
    return products;
  }
  const Fp32Operand fa(a, a.transposed ? k : m, a.transposed ? m : k, how.rounding);
  const Fp32Operand fb(b, b.transposed ? n : k, b.transposed ? k : n, how.rounding);
  const std::int64_t split = (k + how.k_splits - 1) / how.k_splits;
  for (std::int64_t begin = 0; begin < k; begin += split) {
    // op(A)'s columns and op(B)'s rows [begin, begin + depth): each range's partial sums are
    // added to those before it, as a split-k reduction does.
    const std::int64_t depth = std::min(split, k - begin);
    const float* a_part = fa.data() + (a.transposed ? begin : begin * fa.ld());
    const float* b_part = fb.data() + (b.transposed ? begin * fb.ld() : begin);
    sgemm_column_major(a.transposed, b.transposed, m, n, depth, a_part, fa.ld(), b_part, fb.ld(),
                       begin == 0 ? 0.0f : 1.0f, products.data(), m);
  }
  return products;
}

void sgemm_rows(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                float* c, std::int64_t ldc) {
  sgemm_row_major(transpose_a, transpose_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace alloy::emulator
