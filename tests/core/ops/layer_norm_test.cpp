// Layer normalisation on the CPU: forward and backward against a float64 reference from the
// definition at f32, f16 and bf16 inputs with f32 and x-typed parameters; central differences;
// thread-count invariance; constant rows; argument checks.
#include "core/ops/layer_norm.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// Layer normalisation in float64 over rows of `features` values, from the definition.
struct Reference {
  std::int64_t rows, features;

  explicit Reference(const Shape& x) : rows(shape_numel(x) / x.back()), features(x.back()) {}

  void statistics(const std::vector<double>& x, std::vector<double>& mean,
                  std::vector<double>& rstd, double eps) const {
    mean.assign(static_cast<std::size_t>(rows), 0.0);
    rstd.assign(mean.size(), 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      double sum = 0.0, squares = 0.0;
      for (std::int64_t j = 0; j < features; ++j)
        sum += x[at(r, j)];
      const double m = sum / static_cast<double>(features);
      for (std::int64_t j = 0; j < features; ++j)
        squares += (x[at(r, j)] - m) * (x[at(r, j)] - m);
      mean[static_cast<std::size_t>(r)] = m;
      rstd[static_cast<std::size_t>(r)] =
          1.0 / std::sqrt(squares / static_cast<double>(features) + eps);
    }
  }

  std::vector<double> forward(const std::vector<double>& x, const std::vector<double>& weight,
                              const std::vector<double>& bias, double eps) const {
    std::vector<double> mean, rstd, y(x.size());
    statistics(x, mean, rstd, eps);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < features; ++j) {
        const auto f = static_cast<std::size_t>(j);
        y[at(r, j)] = (x[at(r, j)] - mean[static_cast<std::size_t>(r)]) *
                          rstd[static_cast<std::size_t>(r)] * weight[f] +
                      bias[f];
      }
    return y;
  }

  struct Grads {
    std::vector<double> dx, dweight, dbias;
  };

  // The gradients of sum(dy * y), through the row statistics by the chain rule:
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
  Grads backward(const std::vector<double>& x, const std::vector<double>& weight,
                 const std::vector<double>& dy, double eps) const {
    std::vector<double> mean, rstd;
    statistics(x, mean, rstd, eps);
    Grads grads;
    grads.dx.resize(x.size());
    grads.dweight.assign(static_cast<std::size_t>(features), 0.0);
    grads.dbias.assign(grads.dweight.size(), 0.0);
    const double d = static_cast<double>(features);
    for (std::int64_t r = 0; r < rows; ++r) {
      const double m = mean[static_cast<std::size_t>(r)], s = rstd[static_cast<std::size_t>(r)];
      double mean_g = 0.0, mean_gx = 0.0;
      for (std::int64_t j = 0; j < features; ++j) {
        const double g = dy[at(r, j)] * weight[static_cast<std::size_t>(j)];
        mean_g += g / d;
        mean_gx += g * (x[at(r, j)] - m) * s / d;
      }
      for (std::int64_t j = 0; j < features; ++j) {
        const auto f = static_cast<std::size_t>(j);
        const double xhat = (x[at(r, j)] - m) * s;
        grads.dx[at(r, j)] = s * (dy[at(r, j)] * weight[f] - mean_g - xhat * mean_gx);
        grads.dweight[f] += dy[at(r, j)] * xhat;
        grads.dbias[f] += dy[at(r, j)];
      }
    }
    return grads;
  }

  std::size_t at(std::int64_t r, std::int64_t j) const {
    return static_cast<std::size_t>(r * features + j);
  }
};

std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] += b[i];
  return a;
}

// Rows with their own offset and spread, so a kernel that mixed up rows, normalised over the
// wrong axis or ignored the mean would show.
Tensor shifted_input(const Shape& shape, DType dtype, Generator& generator) {
  Tensor x = random_tensor(shape, DType::f32, generator);
  std::vector<float> values = x.to_floats();
  const std::int64_t features = shape.back();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto r = static_cast<float>((static_cast<std::int64_t>(i) / features) % 5);
    values[i] = values[i] * (0.5f + 0.75f * r) + (r - 2.0f);
  }
  return Tensor::from_floats(shape, values, dtype);
}

struct Inputs {
  Tensor x, weight, bias;
};
Inputs random_inputs(const Shape& shape, DType dtype, DType param_dtype, Generator& generator) {
  Inputs inputs;
  inputs.x = shifted_input(shape, dtype, generator);
  inputs.weight = random_tensor({shape.back()}, param_dtype, generator, 0.5f, 1.5f);
  inputs.bias = random_tensor({shape.back()}, param_dtype, generator);
  return inputs;
}

std::string case_name(DType dtype, DType param_dtype, const Shape& shape) {
  return std::string(dtype_name(dtype)) + " params " + dtype_name(param_dtype) + " " +
         shape_str(shape);
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

// One feature (variance 0), a prime D, a 3-d input, and one with more rows than a parameter
// gradient block (32) and D above the row kernels' vector lanes.
const Shape kShapes[] = {{4, 8}, {3, 37}, {2, 5, 19}, {6, 1}, {2, 40, 23}};

constexpr double kAtol = 1e-5;

}  // namespace

BOOST_FIXTURE_TEST_SUITE(layer_norm, TwoThreads)

BOOST_AUTO_TEST_CASE(forward_matches_float64_reference) {
  Generator generator(1);
  const float eps = 1e-3f;
  for (const DType dtype : kFloatTypes) {
    for (const DType param_dtype : {DType::f32, dtype}) {
      for (const Shape& shape : kShapes) {
        const std::string what = case_name(dtype, param_dtype, shape);
        const auto [x, weight, bias] = random_inputs(shape, dtype, param_dtype, generator);
        const LayerNormResult result = layer_norm_forward(x, weight, bias, eps);
        const Reference reference(shape);
        std::vector<double> mean, rstd;
        reference.statistics(to_doubles(x), mean, rstd, eps);
        BOOST_TEST((result.y.dtype() == dtype));
        BOOST_TEST((result.y.shape() == shape));
        BOOST_TEST((result.saved.mean.shape() == Shape{reference.rows}));
        // Statistics in fp32 from the stored (possibly half) inputs.
        check_close(result.saved.mean, mean, 1e-5, kAtol, "mean " + what);
        check_close(result.saved.rstd, rstd, 1e-5, kAtol, "rstd " + what);
        check_close(result.y,
                    reference.forward(to_doubles(x), to_doubles(weight), to_doubles(bias), eps),
                    dtype_tolerance(dtype), kAtol, "y " + what);
        // An evaluation forward saves nothing and gives the same bits.
        const LayerNormResult eval = layer_norm_forward(x, weight, bias, eps, false);
        BOOST_TEST(!eval.saved.mean.defined());
        BOOST_TEST(!eval.saved.rstd.defined());
        BOOST_TEST(same_bits(eval.y, result.y), what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_float64_reference) {
  Generator generator(2);
  const float eps = 1e-5f;
  for (const DType dtype : kFloatTypes) {
    for (const DType param_dtype : {DType::f32, dtype}) {
      // dy in the input's dtype or, from an fp32 loss, in f32.
      for (const DType dy_dtype : {dtype, DType::f32}) {
        for (const Shape& shape : kShapes) {
          const std::string what =
              case_name(dtype, param_dtype, shape) + " dy " + dtype_name(dy_dtype);
          const auto [x, weight, bias] = random_inputs(shape, dtype, param_dtype, generator);
          const Tensor dy = random_tensor(shape, dy_dtype, generator);
          // Existing gradients are added to, not overwritten.
          Tensor dweight = random_tensor({shape.back()}, param_dtype, generator);
          Tensor dbias = random_tensor({shape.back()}, param_dtype, generator);
          const auto dweight_before = to_doubles(dweight);
          const auto dbias_before = to_doubles(dbias);
          const LayerNormResult forward = layer_norm_forward(x, weight, bias, eps);
          const Tensor dx = layer_norm_backward(dy, x, weight, forward.saved, dweight, dbias);
          BOOST_TEST((dx.dtype() == dy_dtype));
          BOOST_TEST((dx.shape() == shape));
          BOOST_TEST((dweight.dtype() == param_dtype));
          const auto exact =
              Reference(shape).backward(to_doubles(x), to_doubles(weight), to_doubles(dy), eps);
          // dx cancels (g - mean terms): its error is relative to the terms, of order rstd.
          check_close(dx, exact.dx, std::max(dtype_tolerance(dy_dtype), 1e-4), 1e-4, "dx " + what);
          const double param_rtol = std::max(dtype_tolerance(param_dtype), 1e-5);
          check_close(dweight, plus(dweight_before, exact.dweight), param_rtol, 1e-4,
                      "dweight " + what);
          check_close(dbias, plus(dbias_before, exact.dbias), param_rtol, 1e-4, "dbias " + what);
        }
      }
    }
  }
}

// Central differences of sum(dy * y) through the f32 op itself, for x, weight and bias.
BOOST_AUTO_TEST_CASE(backward_matches_central_differences) {
  Generator generator(3);
  const float eps = 1e-3f;
  for (const Shape& shape : {Shape{3, 7}, Shape{2, 2, 5}, Shape{4, 1}}) {
    const std::string what = shape_str(shape);
    auto [x, weight, bias] = random_inputs(shape, DType::f32, DType::f32, generator);
    const Tensor dy = random_tensor(shape, DType::f32, generator);
    const auto weights = to_doubles(dy);
    const auto loss = [&] {
      return weighted_sum(layer_norm_forward(x, weight, bias, eps, false).y, weights);
    };
    constexpr float step = 1e-2f;
    const auto numerical_dx = numerical_gradient(loss, x, step);
    const auto numerical_dw = numerical_gradient(loss, weight, step);
    const auto numerical_db = numerical_gradient(loss, bias, step);
    Tensor dweight = Tensor::zeros({shape.back()}, DType::f32);
    Tensor dbias = Tensor::zeros({shape.back()}, DType::f32);
    const LayerNormResult forward = layer_norm_forward(x, weight, bias, eps);
    const Tensor dx = layer_norm_backward(dy, x, weight, forward.saved, dweight, dbias);
    check_close(dx, numerical_dx, 2e-3, 2e-3, "dx vs central differences " + what);
    check_close(dweight, numerical_dw, 2e-3, 2e-3, "dweight vs central differences " + what);
    check_close(dbias, numerical_db, 2e-3, 2e-3, "dbias vs central differences " + what);
  }
}

BOOST_AUTO_TEST_CASE(results_do_not_depend_on_the_thread_count) {
  Generator generator(4);
  // Enough work for the pool to split rows and gradient blocks (300 rows: 10 blocks of 32).
  const Shape shape{3, 100, 130};
  for (const DType dtype : kFloatTypes) {
    const auto [x, weight, bias] = random_inputs(shape, dtype, DType::f32, generator);
    const Tensor dy = random_tensor(shape, dtype, generator);
    std::vector<Tensor> results[3];
    const int threads_before = cpu_threads();
    for (const int threads : {1, 2, 3}) {
      set_cpu_threads(threads);
      const LayerNormResult forward = layer_norm_forward(x, weight, bias, 1e-5f);
      Tensor dweight = Tensor::zeros({shape.back()}, DType::f32);
      Tensor dbias = Tensor::zeros({shape.back()}, DType::f32);
      const Tensor dx = layer_norm_backward(dy, x, weight, forward.saved, dweight, dbias);
      results[threads - 1] = {forward.y, forward.saved.mean, forward.saved.rstd, dx, dweight,
                              dbias};
    }
    set_cpu_threads(threads_before);
    const char* names[] = {"y", "mean", "rstd", "dx", "dweight", "dbias"};
    for (int t = 1; t < 3; ++t)
      for (std::size_t i = 0; i < results[0].size(); ++i)
        BOOST_TEST(same_bits(results[t][i], results[0][i]),
                   dtype_name(dtype) << " " << names[i] << " with " << t + 1 << " threads");
  }
}

BOOST_AUTO_TEST_CASE(constant_rows_give_finite_results) {
  // Variance 0: rstd = 1 / sqrt(eps), x - mean = 0 where the mean is exact, so y = bias.
  Generator generator(5);
  for (const DType dtype : kFloatTypes) {
    for (const float value : {0.0f, 3.5f, -1000.0f}) {
      const std::string what = std::string(dtype_name(dtype)) + " rows of " + std::to_string(value);
      const Shape shape{3, 24};
      const Tensor x = Tensor::from_floats(shape, std::vector<float>(72, value), dtype);
      const Tensor weight = random_tensor({24}, DType::f32, generator, 0.5f, 1.5f);
      const Tensor bias = random_tensor({24}, DType::f32, generator);
      const LayerNormResult forward = layer_norm_forward(x, weight, bias, 1e-5f);
      const std::vector<float> y = forward.y.to_floats();
      const std::vector<float> b = cast(bias, dtype).to_floats();
      for (std::size_t i = 0; i < y.size(); ++i)
        BOOST_TEST(y[i] == b[i % 24], what << " y[" << i << "]");
      const Tensor dy = random_tensor(shape, dtype, generator);
      Tensor dweight = Tensor::zeros({24}, DType::f32), dbias = Tensor::zeros({24}, DType::f32);
      const Tensor dx = layer_norm_backward(dy, x, weight, forward.saved, dweight, dbias);
      for (const float v : dx.to_floats())
        BOOST_TEST(std::isfinite(v), what << " dx");
      for (const float v : dweight.to_floats())
        BOOST_TEST(v == 0.0f, what << " dweight (xhat is 0)");
    }
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_inputs) {
  const Tensor x = Tensor::zeros({2, 3, 4}, DType::f32);
  const Tensor d4 = Tensor::zeros({4}, DType::f32);
  const auto names = [](const char* op, const char* what) {
    return [op, what](const Error& error) {
      const std::string message = error.what();
      return message.find(op) != std::string::npos && message.find(what) != std::string::npos;
    };
  };
  const char* forward = "layer_norm_forward";
  BOOST_CHECK_EXCEPTION(layer_norm_forward(x, Tensor::zeros({3}, DType::f32), d4, 1e-5f), Error,
                        names(forward, "weight must have shape [4]"));
  BOOST_CHECK_EXCEPTION(layer_norm_forward(x, d4, Tensor::zeros({1, 4}, DType::f32), 1e-5f), Error,
                        names(forward, "bias must have shape [4]"));
  // Half parameters only with an input of their own dtype.
  BOOST_CHECK_EXCEPTION(layer_norm_forward(x, Tensor::zeros({4}, DType::f16), d4, 1e-5f), Error,
                        names(forward, "weight must be f32 or x's dtype"));
  BOOST_CHECK_EXCEPTION(layer_norm_forward(Tensor::zeros({2, 4}, DType::bf16),
                                           Tensor::zeros({4}, DType::f16), d4, 1e-5f),
                        Error, names(forward, "weight"));
  BOOST_CHECK_EXCEPTION(layer_norm_forward(Tensor::zeros({2, 4}, DType::i32), d4, d4, 1e-5f), Error,
                        names(forward, "x must be f32, f16 or bf16"));
  BOOST_CHECK_EXCEPTION(
      layer_norm_forward(Tensor::zeros({2, 0}, DType::f32), Tensor::zeros({0}, DType::f32),
                         Tensor::zeros({0}, DType::f32), 1e-5f),
      Error, names(forward, "last dimension"));
  BOOST_CHECK_EXCEPTION(layer_norm_forward(x, d4, d4, -1.0f), Error, names(forward, "eps"));

  const char* backward = "layer_norm_backward";
  const LayerNormResult result = layer_norm_forward(x, d4, d4, 1e-5f);
  Tensor dweight = Tensor::zeros({4}, DType::f32), dbias = Tensor::zeros({4}, DType::f32);
  BOOST_CHECK_EXCEPTION(layer_norm_backward(Tensor::zeros({2, 3, 5}, DType::f32), x, d4,
                                            result.saved, dweight, dbias),
                        Error, names(backward, "dy must have shape [2, 3, 4]"));
  BOOST_CHECK_EXCEPTION(layer_norm_backward(x, x, d4, LayerNormSaved{}, dweight, dbias), Error,
                        names(backward, "saved statistics are undefined"));
  const LayerNormSaved wrong{Tensor::zeros({3}, DType::f32), Tensor::zeros({3}, DType::f32)};
  BOOST_CHECK_EXCEPTION(layer_norm_backward(x, x, d4, wrong, dweight, dbias), Error,
                        names(backward, "saved mean must have shape [6]"));
  Tensor short_grad = Tensor::zeros({3}, DType::f32);
  BOOST_CHECK_EXCEPTION(layer_norm_backward(x, x, d4, result.saved, short_grad, dbias), Error,
                        names(backward, "dweight must have shape [4]"));
  BOOST_TEST(dweight.to_floats() == std::vector<float>(4, 0.0f), "a failed call adds nothing");
}

BOOST_AUTO_TEST_SUITE_END()
