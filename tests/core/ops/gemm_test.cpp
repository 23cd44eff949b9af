#include "core/ops/gemm.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

struct GemmCase {
  std::int64_t m, n, k;
};

// Tiny and odd sizes; one past the parallel threshold split by rows (m >= n) and one split by
// columns (m < n), neither a multiple of the split block.
const GemmCase kCases[] = {{1, 1, 1}, {3, 5, 7}, {17, 2, 33}, {130, 90, 200}, {40, 150, 700}};

// alpha * op(a) op(b) + beta * c in float64, from the definition.
std::vector<double> reference(const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<double>& c, const GemmCase& g,
                              const GemmShape& shape) {
  std::vector<double> out(static_cast<std::size_t>(g.m * g.n));
  for (std::int64_t i = 0; i < g.m; ++i) {
    for (std::int64_t j = 0; j < g.n; ++j) {
      double sum = 0.0;
      for (std::int64_t p = 0; p < g.k; ++p) {
        const double av = shape.transpose_a ? a[p * g.m + i] : a[i * g.k + p];
        const double bv = shape.transpose_b ? b[j * g.k + p] : b[p * g.n + j];
        sum += av * bv;
      }
      const std::size_t index = static_cast<std::size_t>(i * g.n + j);
      out[index] = shape.alpha * sum + (shape.beta == 0.0f ? 0.0 : shape.beta * c[index]);
    }
  }
  return out;
}

Shape a_shape(const GemmCase& g, bool transpose) {
  return transpose ? Shape{g.k, g.m} : Shape{g.m, g.k};
}
Shape b_shape(const GemmCase& g, bool transpose) {
  return transpose ? Shape{g.n, g.k} : Shape{g.k, g.n};
}

std::string describe(const GemmCase& g, const GemmShape& s, DType dtype) {
  return std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) +
         (s.transpose_a ? " aT" : "") + (s.transpose_b ? " bT" : "") + " alpha " +
         std::to_string(s.alpha) + " beta " + std::to_string(s.beta) + " " + dtype_name(dtype);
}

// fp32 accumulation over k products of values below one: its error grows like sqrt(k) ulps.
double accumulation_atol(std::int64_t k) {
  return 1e-6 * std::sqrt(static_cast<double>(k)) + 1e-6;
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(gemm_op, TwoThreads)

BOOST_AUTO_TEST_CASE(matches_float64_reference_for_every_transpose_and_dtype) {
  Generator generator(1);
  for (const DType dtype : kFloatTypes) {
    for (const GemmCase& g : kCases) {
      for (const int transposes : {0, 1, 2, 3}) {
        GemmShape shape;
        shape.transpose_a = (transposes & 1) != 0;
        shape.transpose_b = (transposes & 2) != 0;
        shape.alpha = transposes == 3 ? -0.75f : 1.0f;
        shape.beta = transposes == 1 ? 0.5f : 0.0f;
        const Tensor a = random_tensor(a_shape(g, shape.transpose_a), dtype, generator);
        const Tensor b = random_tensor(b_shape(g, shape.transpose_b), dtype, generator);
        Tensor c = random_tensor({g.m, g.n}, dtype, generator);
        const auto expected = reference(to_doubles(a), to_doubles(b), to_doubles(c), g, shape);
        gemm(a, b, c, shape);
        check_close(c, expected, dtype_tolerance(dtype), accumulation_atol(g.k),
                    describe(g, shape, dtype));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(beta_zero_ignores_nan_and_empty_k_scales_c) {
  for (const DType dtype : kFloatTypes) {
    const Tensor a = Tensor::from_floats({1, 2}, {1.0f, 2.0f}, dtype);
    const Tensor b = Tensor::from_floats({2, 2}, {3.0f, 4.0f, 5.0f, 6.0f}, dtype);
    Tensor c = Tensor::from_floats({1, 2}, {std::numeric_limits<float>::quiet_NaN(), 1.0f}, dtype);
    gemm(a, b, c);
    BOOST_TEST(c.to_floats() == (std::vector<float>{13.0f, 16.0f}), dtype_name(dtype));

    // k == 0: no products, c = beta * c (and beta == 0 clears NaN as above).
    Tensor c2 = Tensor::from_floats({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}, dtype);
    GemmShape half_c;
    half_c.beta = 0.5f;
    gemm(Tensor::zeros({2, 0}, dtype), Tensor::zeros({0, 2}, dtype), c2, half_c);
    BOOST_TEST(c2.to_floats() == (std::vector<float>{0.5f, 1.0f, 1.5f, 2.0f}), dtype_name(dtype));
    Tensor c3 = Tensor::from_floats({1, 1}, {std::numeric_limits<float>::quiet_NaN()}, dtype);
    gemm(Tensor::zeros({1, 0}, dtype), Tensor::zeros({0, 1}, dtype), c3);
    BOOST_TEST(c3.to_floats()[0] == 0.0f, dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(half_results_round_once_and_overflow_to_inf) {
  // 600 * 200 = 120000 exceeds f16's 65504. And products accumulate in fp32: in f16
  // arithmetic 2048 + 1 rounds back to 2048, so the ones below would all be lost.
  const Tensor a = Tensor::from_floats({1, 1}, {600.0f}, DType::f16);
  const Tensor b = Tensor::from_floats({1, 1}, {200.0f}, DType::f16);
  Tensor c = Tensor::zeros({1, 1}, DType::f16);
  gemm(a, b, c);
  BOOST_TEST(std::isinf(c.to_floats()[0]));

  std::vector<float> ones(4097, 1.0f);
  ones[0] = 2048.0f;
  const Tensor row = Tensor::from_floats({1, 4097}, ones, DType::f16);
  const Tensor column = Tensor::from_floats({4097, 1}, std::vector<float>(4097, 1.0f), DType::f16);
  Tensor sum = Tensor::zeros({1, 1}, DType::f16);
  gemm(row, column, sum);
  BOOST_TEST(sum.to_floats()[0] == 6144.0f);  // 2048 + 4096, exact in f16
}

BOOST_AUTO_TEST_CASE(gradients_are_gemms_and_match_central_differences) {
  // For c = a b, d(sum w*c)/da = w b^T and d/db = a^T w: the transposed forms the backward
  // passes of linear and conv2d use.
  Generator generator(2);
  const GemmCase g{4, 3, 5};
  Tensor a = random_tensor({g.m, g.k}, DType::f32, generator);
  Tensor b = random_tensor({g.k, g.n}, DType::f32, generator);
  const Tensor w = random_tensor({g.m, g.n}, DType::f32, generator);
  const auto weights = to_doubles(w);
  const auto loss = [&] {
    Tensor c = Tensor::zeros({g.m, g.n}, DType::f32);
    gemm(a, b, c);
    return weighted_sum(c, weights);
  };
  // Bilinear: a large step costs no truncation error.
  const auto numerical_da = numerical_gradient(loss, a, 0.25f);
  const auto numerical_db = numerical_gradient(loss, b, 0.25f);
  Tensor da = Tensor::zeros({g.m, g.k}, DType::f32);
  GemmShape bt;
  bt.transpose_b = true;
  gemm(w, b, da, bt);
  Tensor db = Tensor::zeros({g.k, g.n}, DType::f32);
  GemmShape at;
  at.transpose_a = true;
  gemm(a, w, db, at);
  check_close(da, numerical_da, 1e-4, 1e-5, "da");
  check_close(db, numerical_db, 1e-4, 1e-5, "db");
}

BOOST_AUTO_TEST_CASE(same_inputs_give_the_same_bits) {
  Generator generator(3);
  for (const DType dtype : kFloatTypes) {
    const Tensor a = random_tensor({130, 200}, dtype, generator);
    const Tensor b = random_tensor({200, 90}, dtype, generator);
    Tensor c1 = Tensor::zeros({130, 90}, dtype), c2 = Tensor::zeros({130, 90}, dtype);
    gemm(a, b, c1);
    gemm(a, b, c2);
    BOOST_TEST(std::memcmp(c1.raw(), c2.raw(), c1.nbytes()) == 0, dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(a_prepared_left_operand_gives_the_same_bits) {
  // cpu::GemmLeft packs op(a) once for many products: each must equal the unprepared call, bit
  // for bit. m over one 128-row block, k over two 256-deep ones, both transposes of a and b,
  // and n below 32 with b transposed (the dot-product kernel, which reads a as it is).
  std::mt19937 random(4);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const int m = 137, k = 300;
  std::vector<float> a(static_cast<std::size_t>(m) * k);
  for (float& x : a)
    x = value(random);
  for (const bool transpose_a : {false, true}) {
    const int lda = transpose_a ? m : k;
    const cpu::GemmLeft left(transpose_a, m, k, a.data(), lda);
    for (const bool transpose_b : {false, true}) {
      for (const int n : {20, 70}) {
        std::vector<float> b(static_cast<std::size_t>(k) * n);
        for (float& x : b)
          x = value(random);
        const int ldb = transpose_b ? k : n;
        std::vector<float> expected(static_cast<std::size_t>(m) * n, 0.5f), got = expected;
        cpu::gemm_serial(transpose_a, transpose_b, m, n, k, 0.75f, a.data(), lda, b.data(), ldb,
                         -1.0f, expected.data(), n);
        cpu::gemm_serial(left, transpose_b, n, 0.75f, b.data(), ldb, -1.0f, got.data(), n);
        BOOST_TEST(std::memcmp(expected.data(), got.data(), got.size() * sizeof(float)) == 0,
                   "aT " << transpose_a << " bT " << transpose_b << " n " << n);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_shapes_and_dtypes) {
  const Tensor a = Tensor::zeros({2, 3}, DType::f32);
  const Tensor b = Tensor::zeros({3, 4}, DType::f32);
  Tensor c = Tensor::zeros({2, 4}, DType::f32);
  Tensor wrong_c = Tensor::zeros({4, 2}, DType::f32);
  Tensor half_c = Tensor::zeros({2, 4}, DType::f16);
  const auto names_op = [](const Error& error) {
    return std::string(error.what()).find("gemm") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(gemm(a, Tensor::zeros({4, 3}, DType::f32), c), Error, names_op);
  BOOST_CHECK_EXCEPTION(gemm(a, b, wrong_c), Error, names_op);
  BOOST_CHECK_EXCEPTION(gemm(a, b, half_c), Error, names_op);
  BOOST_CHECK_EXCEPTION(gemm(a, Tensor::zeros({3, 4}, DType::bf16), c), Error, names_op);
  BOOST_CHECK_EXCEPTION(gemm(Tensor::zeros({6}, DType::f32), b, c), Error, names_op);
  BOOST_CHECK_EXCEPTION(
      gemm(Tensor::zeros({2, 3}, DType::i32), Tensor::zeros({3, 4}, DType::i32), c), Error,
      names_op);
  GemmShape transposed;
  transposed.transpose_a = true;
  BOOST_CHECK_EXCEPTION(gemm(a, b, c, transposed), Error, names_op);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gemm_pair_op)

// Two products at 1-3 threads, unequal in flops, one split by rows and one by columns, each
// against float64 and the same bits on a second call.
BOOST_AUTO_TEST_CASE(pair_matches_float64_at_every_thread_count) {
  Generator generator(3);
  const GemmCase first{130, 90, 200}, second{40, 150, 700};
  GemmShape shape_one, shape_two;
  shape_one.transpose_a = true;
  shape_one.beta = 1.0f;
  shape_two.transpose_b = true;
  const Tensor a1 = random_tensor(a_shape(first, true), DType::f32, generator);
  const Tensor b1 = random_tensor(b_shape(first, false), DType::f32, generator);
  const Tensor c1_start = random_tensor({first.m, first.n}, DType::f32, generator);
  const Tensor a2 = random_tensor(a_shape(second, false), DType::f32, generator);
  const Tensor b2 = random_tensor(b_shape(second, true), DType::f32, generator);
  const auto expected_one =
      reference(to_doubles(a1), to_doubles(b1), to_doubles(c1_start), first, shape_one);
  const auto expected_two = reference(to_doubles(a2), to_doubles(b2), {}, second, shape_two);
  for (const int threads : {1, 2, 3}) {
    set_cpu_threads(threads);
    std::vector<float> previous_one, previous_two;
    for (int call = 0; call < 2; ++call) {
      Tensor c1 = c1_start.clone();
      Tensor c2 = Tensor::from_floats(
          {second.m, second.n},
          std::vector<float>(second.m * second.n, std::numeric_limits<float>::quiet_NaN()),
          DType::f32);
      const int m1 = static_cast<int>(first.m), n1 = static_cast<int>(first.n),
                k1 = static_cast<int>(first.k);
      const int m2 = static_cast<int>(second.m), n2 = static_cast<int>(second.n),
                k2 = static_cast<int>(second.k);
      cpu::gemm_pair({true, false, m1, n1, k1, 1.0f, a1.data<float>(), m1, b1.data<float>(), n1,
                      1.0f, c1.data<float>(), n1},
                     {false, true, m2, n2, k2, 1.0f, a2.data<float>(), k2, b2.data<float>(), k2,
                      0.0f, c2.data<float>(), n2});
      const std::string where = std::to_string(threads) + " threads, call " + std::to_string(call);
      check_close(c1, expected_one, 1e-5, accumulation_atol(first.k), "first, " + where);
      check_close(c2, expected_two, 1e-5, accumulation_atol(second.k), "second, " + where);
      if (call == 1) {
        BOOST_TEST(c1.to_floats() == previous_one, where);
        BOOST_TEST(c2.to_floats() == previous_two, where);
      }
      previous_one = c1.to_floats();
      previous_two = c2.to_floats();
    }
  }
  set_cpu_threads(2);
}

BOOST_AUTO_TEST_SUITE_END()
