#include "tools/cuda_emulator/host_gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>

namespace alloy::emulator {

namespace {

// cblas takes blasint sizes: a larger one would wrap, so it fails the work instead.
blasint blas_size(std::int64_t value) {
  if (value > std::numeric_limits<blasint>::max())
    throw std::length_error("a matrix dimension exceeds the BLAS's integer range");
  return static_cast<blasint>(value);
}

void sgemm(CBLAS_ORDER order, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
           std::int64_t k, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
           float beta, float* c, std::int64_t ldc) {
  // One thread, as alloy's CPU kernels also ask: the work already runs on a host thread per
  // stream, and a fixed split of the work keeps every call's sums in one order.
  static const bool single_thread = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  static_cast<void>(single_thread);
  cblas_sgemm(order, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, blas_size(m), blas_size(n), blas_size(k),
              1.0f, a, blas_size(lda), b, blas_size(ldb), beta, c, blas_size(ldc));
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
    sgemm(CblasColMajor, a.transposed, b.transposed, m, n, depth, a_part, fa.ld(), b_part, fb.ld(),
          begin == 0 ? 0.0f : 1.0f, products.data(), m);
  }
  return products;
}

void sgemm_rows(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                float* c, std::int64_t ldc) {
  sgemm(CblasRowMajor, transpose_a, transpose_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace alloy::emulator
