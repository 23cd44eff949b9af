// Alloy's own AVX-512 GEMM (core/ops/cpu/packed_gemm.cpp) on raw row-major buffers: products
// against float64 across its register tile (8 x 32) and cache blocks (128 rows, 256 deep, 2048
// columns), strided operands, alpha and beta, and the bits of an element independent of how c
// is split. Where the build has no AVX-512 only the refusal is checked.
#include "core/ops/cpu/packed_gemm.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops/gemm.h"
#include "core/thread_pool.h"

using alloy::cpu::packed_gemm;
using alloy::cpu::packed_gemm_available;

namespace {

struct Case {
  int m, n, k;
  bool transpose_a, transpose_b;
  float alpha, beta;
};

// Operands stored with leading dimensions past their widths: the padding holds a sentinel the
// kernel must never read into c, and c's padding must come back untouched.
constexpr int kPad = 3;
constexpr float kSentinel = 1.0e30f;

struct Problem {
  explicit Problem(const Case& g, unsigned seed) : g(g) {
    std::mt19937 random(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    const int a_rows = g.transpose_a ? g.k : g.m, a_columns = g.transpose_a ? g.m : g.k;
    const int b_rows = g.transpose_b ? g.n : g.k, b_columns = g.transpose_b ? g.k : g.n;
    lda = a_columns + kPad;
    ldb = b_columns + kPad;
    ldc = g.n + kPad;
    a = filled(a_rows, a_columns, lda, random, value);
    b = filled(b_rows, b_columns, ldb, random, value);
    c = filled(g.m, g.n, ldc, random, value);
  }

  template <class Random, class Value>
  static std::vector<float> filled(int rows, int columns, int ld, Random& random, Value& value) {
    std::vector<float> out(static_cast<std::size_t>(rows) * ld, kSentinel);
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j < columns; ++j)
        out[static_cast<std::size_t>(i) * ld + j] = value(random);
    }
    return out;
  }

  double a_at(int i, int p) const { return g.transpose_a ? a[p * lda + i] : a[i * lda + p]; }
  double b_at(int p, int j) const { return g.transpose_b ? b[j * ldb + p] : b[p * ldb + j]; }

  // alpha * op(a) op(b) + beta * c in float64 from the definition (beta == 0: c unread).
  std::vector<double> expected() const {
    std::vector<double> out(static_cast<std::size_t>(g.m) * g.n);
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < g.n; ++j) {
        double sum = 0.0;
        for (int p = 0; p < g.k; ++p)
          sum += a_at(i, p) * b_at(p, j);
        const double old = g.beta == 0.0f ? 0.0 : g.beta * double{c[i * ldc + j]};
        out[static_cast<std::size_t>(i) * g.n + j] = g.alpha * sum + old;
      }
    }
    return out;
  }

  // c's rows [row, row + rows) and columns [column, column + columns), as one call.
  void run_part(std::vector<float>& out, int row, int rows, int column, int columns) const {
    const float* a_part = g.transpose_a ? a.data() + row : a.data() + row * lda;
    const float* b_part = g.transpose_b ? b.data() + column * ldb : b.data() + column;
    packed_gemm(g.transpose_a, g.transpose_b, rows, columns, g.k, g.alpha, a_part, lda, b_part, ldb,
                g.beta, out.data() + row * ldc + column, ldc);
  }

  std::vector<float> run() const {
    std::vector<float> out = c;
    run_part(out, 0, g.m, 0, g.n);
    return out;
  }

  Case g;
  int lda = 0, ldb = 0, ldc = 0;
  std::vector<float> a, b, c;
};

std::string describe(const Case& g) {
  return std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) +
         (g.transpose_a ? " aT" : "") + (g.transpose_b ? " bT" : "") + " alpha " +
         std::to_string(g.alpha) + " beta " + std::to_string(g.beta);
}

// Each size one below, at and one past a tile or block edge in some dimension: 8-row tiles and
// 128-row blocks of a, 32-column tiles and 2048-column blocks of b, 256-deep blocks (k = 513
// takes three, the last one deep). The last three take the dot-product kernel (b transposed, a
// not, n < 32): 4 x 4 tiles, 16-deep steps with a partial last one (k = 676 and 15).
const Case kCases[] = {
    {1, 1, 1, false, false, 1.0f, 0.0f},     {7, 31, 9, false, false, 1.0f, 0.0f},
    {8, 32, 8, true, false, 1.0f, 1.0f},     {9, 33, 7, false, true, 1.0f, 0.0f},
    {17, 65, 255, true, true, -0.5f, 0.25f}, {127, 64, 256, false, false, 1.0f, 0.0f},
    {129, 40, 257, false, true, 2.0f, 1.0f}, {64, 2049, 20, false, false, 1.0f, 0.5f},
    {40, 70, 513, true, false, 1.0f, 0.0f},  {136, 96, 300, true, true, 0.75f, -1.0f},
    {50, 20, 400, false, true, 1.0f, 0.0f},  {13, 9, 676, false, true, -0.5f, 0.25f},
    {5, 31, 15, false, true, 1.0f, 1.0f},
};

struct RequiresKernel {
  boost::test_tools::assertion_result operator()(boost::unit_test::test_unit_id) const {
    boost::test_tools::assertion_result result(packed_gemm_available());
    result.message() << "this build has no AVX-512 GEMM";
    return result;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(packed_gemm_kernel)

BOOST_AUTO_TEST_CASE(matches_float64_and_leaves_c_padding_alone,
                     *boost::unit_test::precondition(RequiresKernel())) {
  unsigned seed = 1;
  for (const Case& g : kCases) {
    const Problem problem(g, seed++);
    const std::vector<float> out = problem.run();
    const std::vector<double> expected = problem.expected();
    // fp32 sums of k products of values below one: error of order sqrt(k) ulps of the sum.
    const double atol = 2e-6 * std::sqrt(static_cast<double>(g.k)) + 1e-6;
    int wrong = 0, touched = 0;
    for (int i = 0; i < g.m; ++i) {
      for (int j = 0; j < g.n + kPad; ++j) {
        const float got = out[static_cast<std::size_t>(i) * problem.ldc + j];
        if (j >= g.n) {
          touched += got != kSentinel;
          continue;
        }
        const double want = expected[static_cast<std::size_t>(i) * g.n + j];
        wrong += std::fabs(got - want) > atol + 1e-6 * std::fabs(want);
      }
    }
    BOOST_TEST(wrong == 0, describe(g));
    BOOST_TEST(touched == 0, describe(g));
  }
}

BOOST_AUTO_TEST_CASE(beta_zero_ignores_nan_in_c,
                     *boost::unit_test::precondition(RequiresKernel())) {
  const Case g{9, 33, 5, false, false, 1.0f, 0.0f};
  Problem problem(g, 7);
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j)
      problem.c[i * problem.ldc + j] = std::numeric_limits<float>::quiet_NaN();
  }
  const std::vector<float> out = problem.run();
  int nan = 0;
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j)
      nan += std::isnan(out[i * problem.ldc + j]);
  }
  BOOST_TEST(nan == 0);
}

BOOST_AUTO_TEST_CASE(an_elements_bits_do_not_depend_on_how_c_is_split,
                     *boost::unit_test::precondition(RequiresKernel())) {
  // cpu::gemm hands each thread a block of rows, or of at least 32 columns; the whole product
  // and any such split of it, at tile edges or not, must agree to the bit (general alpha and
  // beta included), on the register-tile kernel (n = 100) and the dot-product one (n = 20).
  for (const Case& g : {Case{45, 100, 300, false, true, 0.75f, -0.5f},
                        Case{45, 20, 300, false, true, 0.75f, -0.5f}}) {
    const Problem problem(g, 11);
    const std::vector<float> whole = problem.run();
    std::vector<float> by_rows = problem.c, by_columns = problem.c;
    const int row_edges[] = {0, 5, 21, 40, g.m};
    for (int part = 0; part + 1 < 5; ++part) {
      problem.run_part(by_rows, row_edges[part], row_edges[part + 1] - row_edges[part], 0, g.n);
    }
    BOOST_TEST(std::memcmp(whole.data(), by_rows.data(), whole.size() * sizeof(float)) == 0,
               describe(g));
    if (g.n < 64) continue;
    const int column_edges[] = {0, 35, 68, g.n};
    for (int part = 0; part + 1 < 4; ++part) {
      problem.run_part(by_columns, 0, g.m, column_edges[part],
                       column_edges[part + 1] - column_edges[part]);
    }
    BOOST_TEST(std::memcmp(whole.data(), by_columns.data(), whole.size() * sizeof(float)) == 0,
               describe(g));
  }
}

BOOST_AUTO_TEST_CASE(cpu_gemm_gives_the_same_bits_at_one_and_two_threads,
                     *boost::unit_test::precondition(RequiresKernel())) {
  // 30 x 40 split by columns at 32 would leave a block of 8, which the dot-product kernel would
  // take: cpu::gemm keeps its blocks at least 32 wide, so both thread counts agree. The others:
  // a row split, and a column split into wide blocks.
  for (const Case& g :
       {Case{30, 40, 2000, false, true, 1.0f, 0.0f}, Case{200, 24, 900, false, true, 1.0f, 1.0f},
        Case{40, 300, 400, false, true, 1.0f, 0.0f}}) {
    const Problem problem(g, 5);
    std::vector<std::vector<float>> results;
    for (const int threads : {1, 2}) {
      alloy::set_cpu_threads(threads);
      std::vector<float> out = problem.c;
      alloy::cpu::gemm(g.transpose_a, g.transpose_b, g.m, g.n, g.k, g.alpha, problem.a.data(),
                       problem.lda, problem.b.data(), problem.ldb, g.beta, out.data(), problem.ldc);
      results.push_back(out);
    }
    BOOST_TEST(
        std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0,
        describe(g));
  }
}

BOOST_AUTO_TEST_CASE(a_build_without_avx512_refuses_by_name,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) {
                       boost::test_tools::assertion_result result(!packed_gemm_available());
                       result.message() << "this build has the AVX-512 GEMM";
                       return result;
                     })) {
  float a = 1.0f, b = 1.0f, c = 0.0f;
  BOOST_CHECK_EXCEPTION(packed_gemm(false, false, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1),
                        alloy::Error, [](const alloy::Error& error) {
                          return std::string(error.what()).find("AVX-512") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_SUITE_END()
