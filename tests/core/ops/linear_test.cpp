#include "core/ops/linear.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

struct LinearCase {
  std::int64_t batch, in, out;
  bool bias;
};

// One row, odd sizes, and LeNet's classifier at a batch large enough for the thread pool.
const LinearCase kCases[] = {
    {1, 3, 2, true}, {5, 7, 4, false}, {6, 9, 11, true}, {64, 500, 10, true}};

std::string describe(const LinearCase& c, DType dtype) {
  return std::to_string(c.batch) + "x" + std::to_string(c.in) + "->" + std::to_string(c.out) +
         (c.bias ? " bias " : " ") + dtype_name(dtype);
}

// y = x w^T + b and its gradients in float64, from the definition.
struct Reference {
  LinearCase c;

  std::vector<double> forward(const std::vector<double>& x, const std::vector<double>& w,
                              const std::vector<double>& b) const {
    std::vector<double> y(static_cast<std::size_t>(c.batch * c.out));
    for (std::int64_t n = 0; n < c.batch; ++n)
      for (std::int64_t o = 0; o < c.out; ++o) {
        double sum = b.empty() ? 0.0 : b[o];
        for (std::int64_t i = 0; i < c.in; ++i)
          sum += x[n * c.in + i] * w[o * c.in + i];
        y[n * c.out + o] = sum;
      }
    return y;
  }

  struct Grads {
    std::vector<double> dx, dw, db;
  };

  Grads backward(const std::vector<double>& x, const std::vector<double>& w,
                 const std::vector<double>& dy) const {
    Grads g;
    g.dx.assign(static_cast<std::size_t>(c.batch * c.in), 0.0);
    g.dw.assign(static_cast<std::size_t>(c.out * c.in), 0.0);
    g.db.assign(static_cast<std::size_t>(c.out), 0.0);
    for (std::int64_t n = 0; n < c.batch; ++n)
      for (std::int64_t o = 0; o < c.out; ++o) {
        const double d = dy[n * c.out + o];
        g.db[o] += d;
        for (std::int64_t i = 0; i < c.in; ++i) {
          g.dx[n * c.in + i] += d * w[o * c.in + i];
          g.dw[o * c.in + i] += d * x[n * c.in + i];
        }
      }
    return g;
  }
};

std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] += b[i];
  return a;
}

constexpr double kAtol = 1e-5;

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(linear, TwoThreads)

BOOST_AUTO_TEST_CASE(forward_matches_float64_reference) {
  Generator generator(1);
  for (const DType dtype : kFloatTypes) {
    for (const LinearCase& c : kCases) {
      const Tensor x = random_tensor({c.batch, c.in}, dtype, generator);
      const Tensor w = random_tensor({c.out, c.in}, dtype, generator);
      const Tensor b = c.bias ? random_tensor({c.out}, dtype, generator) : Tensor();
      const Tensor y = linear_forward(x, w, b);
      BOOST_TEST((y.shape() == Shape{c.batch, c.out}));
      BOOST_TEST((y.dtype() == dtype));
      const auto expected = Reference{c}.forward(to_doubles(x), to_doubles(w),
                                                 c.bias ? to_doubles(b) : std::vector<double>{});
      check_close(y, expected, dtype_tolerance(dtype), kAtol, "y " + describe(c, dtype));
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_central_differences) {
  Generator generator(2);
  for (const LinearCase& c : kCases) {
    if (c.in * c.out > 1000) continue;  // central differences cost two forwards per element
    Tensor x = random_tensor({c.batch, c.in}, DType::f32, generator);
    Tensor w = random_tensor({c.out, c.in}, DType::f32, generator);
    Tensor b = c.bias ? random_tensor({c.out}, DType::f32, generator) : Tensor();
    const Tensor dy = random_tensor({c.batch, c.out}, DType::f32, generator);
    const auto weights = to_doubles(dy);
    const auto loss = [&] { return weighted_sum(linear_forward(x, w, b), weights); };
    // Linear in each input: a large step costs no truncation error.
    const auto numerical_dx = numerical_gradient(loss, x, 0.25f);
    const auto numerical_dw = numerical_gradient(loss, w, 0.25f);

    // Gradients accumulate into what is there.
    Tensor dw = random_tensor(w.shape(), DType::f32, generator);
    Tensor db = c.bias ? random_tensor({c.out}, DType::f32, generator) : Tensor();
    const auto dw_before = to_doubles(dw);
    const auto db_before = c.bias ? to_doubles(db) : std::vector<double>{};
    const LinearGrads grads = linear_backward(x, w, dy, dw, db, true);
    BOOST_TEST_REQUIRE(grads.dx.defined());
    const std::string what = describe(c, DType::f32);
    check_close(grads.dx, numerical_dx, 1e-4, 1e-4, "dx vs central differences " + what);
    check_close(dw, plus(dw_before, numerical_dw), 1e-4, 1e-4, "dw vs central differences " + what);
    if (c.bias) {
      const auto numerical_db = numerical_gradient(loss, b, 0.25f);
      check_close(db, plus(db_before, numerical_db), 1e-4, 1e-4,
                  "db vs central differences " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_float64_reference_in_every_dtype) {
  Generator generator(3);
  for (const DType dtype : kFloatTypes) {
    for (const LinearCase& c : kCases) {
      const Tensor x = random_tensor({c.batch, c.in}, dtype, generator);
      const Tensor w = random_tensor({c.out, c.in}, dtype, generator);
      const Tensor dy = random_tensor({c.batch, c.out}, dtype, generator);
      Tensor dw = random_tensor(w.shape(), dtype, generator);
      Tensor db = c.bias ? random_tensor({c.out}, dtype, generator) : Tensor();
      const auto dw_before = to_doubles(dw);
      const auto db_before = c.bias ? to_doubles(db) : std::vector<double>{};
      const LinearGrads grads = linear_backward(x, w, dy, dw, db, true);
      BOOST_TEST((grads.dx.dtype() == dtype));
      const auto exact = Reference{c}.backward(to_doubles(x), to_doubles(w), to_doubles(dy));
      const std::string what = describe(c, dtype);
      // Sums over the batch (dw, db) have more terms: fp32 accumulation error grows with them.
      const double atol = kAtol * static_cast<double>(c.batch);
      check_close(grads.dx, exact.dx, dtype_tolerance(dtype), kAtol, "dx " + what);
      check_close(dw, plus(dw_before, exact.dw), dtype_tolerance(dtype), atol, "dw " + what);
      if (c.bias)
        check_close(db, plus(db_before, exact.db), dtype_tolerance(dtype), atol, "db " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(need_dx_false_skips_dx_only) {
  Generator generator(4);
  for (const DType dtype : kFloatTypes) {
    const Tensor x = random_tensor({6, 9}, dtype, generator);
    const Tensor w = random_tensor({11, 9}, dtype, generator);
    const Tensor dy = random_tensor({6, 11}, dtype, generator);
    Tensor dw[2] = {Tensor::zeros({11, 9}, dtype), Tensor::zeros({11, 9}, dtype)};
    Tensor db[2] = {Tensor::zeros({11}, dtype), Tensor::zeros({11}, dtype)};
    const LinearGrads with = linear_backward(x, w, dy, dw[0], db[0], true);
    const LinearGrads without = linear_backward(x, w, dy, dw[1], db[1], false);
    BOOST_TEST(with.dx.defined());
    BOOST_TEST(!without.dx.defined());
    BOOST_TEST(std::memcmp(dw[0].raw(), dw[1].raw(), dw[0].nbytes()) == 0, dtype_name(dtype));
    BOOST_TEST(std::memcmp(db[0].raw(), db[1].raw(), db[0].nbytes()) == 0, dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_inputs) {
  const Tensor x = Tensor::zeros({2, 3}, DType::f32);
  const Tensor w = Tensor::zeros({4, 3}, DType::f32);
  const auto names_op = [](const Error& error) {
    return std::string(error.what()).find("linear") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(linear_forward(x, Tensor::zeros({4, 2}, DType::f32), Tensor()), Error,
                        names_op);
  BOOST_CHECK_EXCEPTION(linear_forward(x, w, Tensor::zeros({3}, DType::f32)), Error, names_op);
  BOOST_CHECK_EXCEPTION(linear_forward(x, Tensor::zeros({4, 3}, DType::f16), Tensor()), Error,
                        names_op);
  BOOST_CHECK_EXCEPTION(linear_forward(Tensor::zeros({2, 3, 1}, DType::f32), w, Tensor()), Error,
                        names_op);
  Tensor dw = Tensor::zeros({4, 3}, DType::f32), db = Tensor::zeros({4}, DType::f32);
  Tensor bad_dw = Tensor::zeros({3, 4}, DType::f32);
  BOOST_CHECK_EXCEPTION(linear_backward(x, w, Tensor::zeros({2, 5}, DType::f32), dw, db, true),
                        Error, names_op);
  BOOST_CHECK_EXCEPTION(linear_backward(x, w, Tensor::zeros({2, 4}, DType::f32), bad_dw, db, true),
                        Error, names_op);
}

BOOST_AUTO_TEST_SUITE_END()
