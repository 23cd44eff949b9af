#include "core/ops/batch_norm2d.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "core/ops/elementwise.h"
#include "core/ops/relu.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// Batch normalisation in float64, straight from the definition (PyTorch's semantics).
class Reference {
 public:
  explicit Reference(const Shape& x) : n_(x[0]), c_(x[1]), plane_(x[2] * x[3]) {}

  std::int64_t count() const { return n_ * plane_; }

  // Per channel: the batch mean and the biased variance.
  void statistics(const std::vector<double>& x, std::vector<double>& mean,
                  std::vector<double>& variance) const {
    mean.assign(static_cast<std::size_t>(c_), 0.0);
    variance.assign(mean.size(), 0.0);
    visit([&](std::size_t i, std::size_t c) { mean[c] += x[i]; });
    for (auto& m : mean)
      m /= static_cast<double>(count());
    visit(
        [&](std::size_t i, std::size_t c) { variance[c] += (x[i] - mean[c]) * (x[i] - mean[c]); });
    for (auto& v : variance)
      v /= static_cast<double>(count());
  }

  std::vector<double> normalize(const std::vector<double>& x, const std::vector<double>& mean,
                                const std::vector<double>& variance,
                                const std::vector<double>& weight, const std::vector<double>& bias,
                                double eps) const {
    std::vector<double> y(x.size());
    visit([&](std::size_t i, std::size_t c) {
      y[i] = (x[i] - mean[c]) / std::sqrt(variance[c] + eps) * weight[c] + bias[c];
    });
    return y;
  }

  struct Grads {
    std::vector<double> dx, dweight, dbias;
  };

  // The gradients of sum(dy * y) for the training-mode forward, by the chain rule through
  // the batch statistics: dx = w / sigma * (dy - mean(dy) - xhat * mean(dy * xhat)).
  Grads backward(const std::vector<double>& x, const std::vector<double>& weight,
                 const std::vector<double>& dy, double eps) const {
    std::vector<double> mean, variance;
    statistics(x, mean, variance);
    std::vector<double> sigma(mean.size());
    for (std::size_t c = 0; c < sigma.size(); ++c)
      sigma[c] = std::sqrt(variance[c] + eps);
    Grads g;
    g.dweight.assign(mean.size(), 0.0);
    g.dbias.assign(mean.size(), 0.0);
    visit([&](std::size_t i, std::size_t c) {
      g.dbias[c] += dy[i];
      g.dweight[c] += dy[i] * (x[i] - mean[c]) / sigma[c];
    });
    g.dx.resize(x.size());
    const double m = static_cast<double>(count());
    visit([&](std::size_t i, std::size_t c) {
      const double xhat = (x[i] - mean[c]) / sigma[c];
      g.dx[i] = weight[c] / sigma[c] * (dy[i] - g.dbias[c] / m - xhat * g.dweight[c] / m);
    });
    return g;
  }

 private:
  // Calls f(element index, channel) for every element.
  template <class F>
  void visit(const F& f) const {
    for (std::int64_t n = 0; n < n_; ++n)
      for (std::int64_t c = 0; c < c_; ++c)
        for (std::int64_t p = 0; p < plane_; ++p)
          f(static_cast<std::size_t>((n * c_ + c) * plane_ + p), static_cast<std::size_t>(c));
  }

  std::int64_t n_, c_, plane_;
};

std::vector<double> plus(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] += b[i];
  return a;
}

// Inputs with a per-channel offset and spread, so the statistics are not all near (0, 1/3)
// and a kernel that mixed up channels or ignored the mean would show.
Tensor shifted_input(const Shape& shape, DType dtype, Generator& generator) {
  Tensor x = random_tensor(shape, DType::f32, generator);
  std::vector<float> values = x.to_floats();
  const std::int64_t channels = shape[1], plane = shape[2] * shape[3];
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto c = static_cast<float>((static_cast<std::int64_t>(i) / plane) % channels);
    values[i] = values[i] * (0.5f + 0.5f * c) + (c - 1.0f);
  }
  return Tensor::from_floats(shape, values, dtype);
}

// "<dtype> params <param dtype> <shape>", naming a case in messages.
std::string case_name(DType dtype, DType param_dtype, const Shape& shape) {
  return std::string(dtype_name(dtype)) + " params " + dtype_name(param_dtype) + " " +
         shape_str(shape);
}

// An input, weight, bias and running statistics, drawn in this order.
struct Inputs {
  Tensor x, weight, bias, running_mean, running_var;
};
Inputs random_inputs(const Shape& shape, DType dtype, DType param_dtype, Generator& generator) {
  Inputs inputs;
  inputs.x = shifted_input(shape, dtype, generator);
  inputs.weight = random_tensor({shape[1]}, param_dtype, generator, 0.5f, 1.5f);
  inputs.bias = random_tensor({shape[1]}, param_dtype, generator);
  inputs.running_mean = random_tensor({shape[1]}, param_dtype, generator);
  inputs.running_var = random_tensor({shape[1]}, param_dtype, generator, 0.5f, 2.0f);
  return inputs;
}

// The training forward of f32 x, weight and bias, and central differences of sum(dy * y) by
// each of them: the backward under test starts from that forward.
struct CentralDifferences {
  BatchNormTrainResult forward;
  std::vector<double> dx, dweight, dbias;
};
CentralDifferences central_differences(Tensor& x, Tensor& weight, Tensor& bias, const Tensor& dy,
                                       const BatchNormParams& params) {
  Tensor running_mean = Tensor::zeros({x.dim(1)}, DType::f32);
  Tensor running_var = Tensor::zeros({x.dim(1)}, DType::f32);
  const auto weights = to_doubles(dy);
  const auto loss = [&] {
    return weighted_sum(
        batch_norm2d_train_forward(x, weight, bias, running_mean, running_var, params).y, weights);
  };
  // Smooth (or kept off the ReLU's kink): the step trades truncation (step^2) against fp32
  // rounding of y.
  constexpr float step = 1e-2f;
  CentralDifferences result;
  result.dx = numerical_gradient(loss, x, step);
  result.dweight = numerical_gradient(loss, weight, step);
  result.dbias = numerical_gradient(loss, bias, step);
  result.forward = batch_norm2d_train_forward(x, weight, bias, running_mean, running_var, params);
  return result;
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

// Shapes with one and several images, planes of one element, and one large enough for the
// thread pool to split the planes.
const Shape kShapes[] = {{2, 3, 4, 5}, {1, 2, 3, 3}, {7, 3, 1, 1}, {8, 4, 16, 16}};

// Absolute slack for fp32 arithmetic on values of order one.
constexpr double kAtol = 1e-5;

}  // namespace

BOOST_FIXTURE_TEST_SUITE(batch_norm2d, TwoThreads)

BOOST_AUTO_TEST_CASE(train_forward_matches_float64_reference) {
  Generator generator(1);
  BatchNormParams params;
  params.momentum = 0.3f;
  params.eps = 1e-3f;
  for (const DType dtype : kFloatTypes) {
    // f32 parameters with a half input are O2's keep_batchnorm_fp32; half parameters, O3.
    for (const DType param_dtype : {DType::f32, dtype}) {
      for (const Shape& shape : kShapes) {
        const std::string what = case_name(dtype, param_dtype, shape);
        auto [x, weight, bias, running_mean, running_var] =
            random_inputs(shape, dtype, param_dtype, generator);
        const auto old_mean = to_doubles(running_mean);
        const auto old_var = to_doubles(running_var);

        const BatchNormTrainResult result =
            batch_norm2d_train_forward(x, weight, bias, running_mean, running_var, params);

        const Reference reference(shape);
        std::vector<double> mean, variance;
        reference.statistics(to_doubles(x), mean, variance);
        BOOST_TEST((result.y.dtype() == dtype));
        BOOST_TEST((result.y.shape() == shape));
        // Statistics are computed in fp32 from the stored (possibly half) inputs.
        check_close(result.saved.mean, mean, 1e-5, kAtol, "saved mean " + what);
        std::vector<double> invstd(variance.size());
        for (std::size_t c = 0; c < invstd.size(); ++c)
          invstd[c] = 1.0 / std::sqrt(variance[c] + params.eps);
        check_close(result.saved.invstd, invstd, 1e-5, kAtol, "saved invstd " + what);
        check_close(result.y,
                    reference.normalize(to_doubles(x), mean, variance, to_doubles(weight),
                                        to_doubles(bias), params.eps),
                    dtype_tolerance(dtype), kAtol, "y " + what);

        // PyTorch's running statistics: momentum towards the batch mean and the unbiased
        // variance, rounded once into the buffers' dtype.
        const double m = static_cast<double>(reference.count());
        std::vector<double> new_mean(mean.size()), new_var(mean.size());
        for (std::size_t c = 0; c < mean.size(); ++c) {
          new_mean[c] = (1.0 - params.momentum) * old_mean[c] + params.momentum * mean[c];
          new_var[c] =
              (1.0 - params.momentum) * old_var[c] + params.momentum * variance[c] * m / (m - 1.0);
        }
        check_close(running_mean, new_mean, dtype_tolerance(param_dtype), kAtol,
                    "running mean " + what);
        check_close(running_var, new_var, dtype_tolerance(param_dtype), kAtol,
                    "running var " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_forward_without_the_running_update_changes_only_that) {
  // A recomputed block's second forward: the same output and saved statistics, bit for bit,
  // and running statistics left as they were.
  Generator generator(4);
  for (const DType dtype : kFloatTypes) {
    for (const bool relu : {false, true}) {
      const Shape shape{8, 4, 16, 16};
      const std::string what = case_name(dtype, DType::f32, shape) + (relu ? " relu" : "");
      auto [x, weight, bias, running_mean, running_var] =
          random_inputs(shape, dtype, DType::f32, generator);
      const auto mean_before = running_mean.to_floats();
      const auto var_before = running_var.to_floats();
      BatchNormParams params;
      params.relu = relu;
      Tensor updated_mean = running_mean.clone(), updated_var = running_var.clone();
      const BatchNormTrainResult updating =
          batch_norm2d_train_forward(x, weight, bias, updated_mean, updated_var, params);
      params.update_running_statistics = false;
      const BatchNormTrainResult kept =
          batch_norm2d_train_forward(x, weight, bias, running_mean, running_var, params);
      BOOST_TEST(kept.y.to_floats() == updating.y.to_floats(), "y " << what);
      BOOST_TEST(kept.saved.mean.to_floats() == updating.saved.mean.to_floats(), what);
      BOOST_TEST(kept.saved.invstd.to_floats() == updating.saved.invstd.to_floats(), what);
      BOOST_TEST(running_mean.to_floats() == mean_before, "running mean kept " << what);
      BOOST_TEST(running_var.to_floats() == var_before, "running var kept " << what);
      BOOST_TEST(updated_mean.to_floats() != mean_before, "the updating forward moved it " << what);
    }
  }
}

BOOST_AUTO_TEST_CASE(eval_forward_uses_the_running_statistics) {
  Generator generator(2);
  BatchNormParams params;
  params.eps = 1e-2f;
  for (const DType dtype : kFloatTypes) {
    for (const DType param_dtype : {DType::f32, dtype}) {
      for (const Shape& shape : kShapes) {
        const std::string what = case_name(dtype, param_dtype, shape);
        const auto [x, weight, bias, running_mean, running_var] =
            random_inputs(shape, dtype, param_dtype, generator);
        const auto mean_before = running_mean.to_floats();
        const auto var_before = running_var.to_floats();
        const Tensor y =
            batch_norm2d_eval_forward(x, weight, bias, running_mean, running_var, params);
        BOOST_TEST((y.dtype() == dtype));
        const auto expected = Reference(shape).normalize(
            to_doubles(x), to_doubles(running_mean), to_doubles(running_var), to_doubles(weight),
            to_doubles(bias), params.eps);
        check_close(y, expected, dtype_tolerance(dtype), kAtol, "eval y " + what);
        BOOST_TEST(running_mean.to_floats() == mean_before, "running mean untouched " << what);
        BOOST_TEST(running_var.to_floats() == var_before, "running var untouched " << what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_central_differences) {
  Generator generator(3);
  BatchNormParams params;
  params.eps = 1e-3f;
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{4, 2, 1, 1}, Shape{1, 2, 3, 3}}) {
    const std::string what = shape_str(shape);
    Tensor x = shifted_input(shape, DType::f32, generator);
    Tensor weight = random_tensor({shape[1]}, DType::f32, generator, 0.5f, 1.5f);
    Tensor bias = random_tensor({shape[1]}, DType::f32, generator);
    const Tensor dy = random_tensor(shape, DType::f32, generator);
    const CentralDifferences numerical = central_differences(x, weight, bias, dy, params);

    // Existing parameter gradients are added to, not overwritten.
    Tensor dweight = random_tensor({shape[1]}, DType::f32, generator);
    Tensor dbias = random_tensor({shape[1]}, DType::f32, generator);
    const auto dweight_before = to_doubles(dweight);
    const auto dbias_before = to_doubles(dbias);
    const Tensor dx = batch_norm2d_backward(x, weight, dy, numerical.forward.saved, dweight, dbias);
    BOOST_TEST((dx.shape() == shape));
    check_close(dx, numerical.dx, 2e-3, 2e-3, "dx vs central differences " + what);
    check_close(dweight, plus(dweight_before, numerical.dweight), 2e-3, 2e-3,
                "dweight vs central differences " + what);
    check_close(dbias, plus(dbias_before, numerical.dbias), 2e-3, 2e-3,
                "dbias vs central differences " + what);

    const auto exact =
        Reference(shape).backward(to_doubles(x), to_doubles(weight), to_doubles(dy), params.eps);
    check_close(dx, exact.dx, 1e-4, kAtol, "dx vs float64 " + what);
    check_close(dweight, plus(dweight_before, exact.dweight), 1e-4, kAtol,
                "dweight vs float64 " + what);
    check_close(dbias, plus(dbias_before, exact.dbias), 1e-4, kAtol, "dbias vs float64 " + what);
  }
}

BOOST_AUTO_TEST_CASE(half_backward_matches_float64_reference) {
  Generator generator(4);
  BatchNormParams params;
  for (const DType dtype : {DType::f16, DType::bf16}) {
    for (const DType param_dtype : {DType::f32, dtype}) {
      // dy arrives in the input's dtype or, from an fp32 loss, in f32.
      for (const DType dy_dtype : {dtype, DType::f32}) {
        for (const Shape& shape : kShapes) {
          const std::string what = std::string(dtype_name(dtype)) + " params " +
                                   dtype_name(param_dtype) + " dy " + dtype_name(dy_dtype) + " " +
                                   shape_str(shape);
          const Tensor x = shifted_input(shape, dtype, generator);
          const Tensor weight = random_tensor({shape[1]}, param_dtype, generator, 0.5f, 1.5f);
          const Tensor bias = random_tensor({shape[1]}, param_dtype, generator);
          Tensor running_mean = Tensor::zeros({shape[1]}, param_dtype);
          Tensor running_var = Tensor::zeros({shape[1]}, param_dtype);
          const Tensor dy = random_tensor(shape, dy_dtype, generator);
          Tensor dweight = random_tensor({shape[1]}, param_dtype, generator);
          Tensor dbias = random_tensor({shape[1]}, param_dtype, generator);
          const auto dweight_before = to_doubles(dweight);
          const auto dbias_before = to_doubles(dbias);
          const BatchNormTrainResult forward =
              batch_norm2d_train_forward(x, weight, bias, running_mean, running_var, params);
          const Tensor dx = batch_norm2d_backward(x, weight, dy, forward.saved, dweight, dbias);
          BOOST_TEST((dx.dtype() == dtype));
          const auto exact = Reference(shape).backward(to_doubles(x), to_doubles(weight),
                                                       to_doubles(dy), params.eps);
          // dx cancels (dy - mean terms): its error is relative to the terms, not the result.
          const double rtol = dtype_tolerance(dtype);
          check_close(dx, exact.dx, rtol, 1e-4, "dx " + what);
          const double param_rtol = dtype_tolerance(param_dtype);
          check_close(dweight, plus(dweight_before, exact.dweight), param_rtol, 1e-4,
                      "dweight " + what);
          check_close(dbias, plus(dbias_before, exact.dbias), param_rtol, 1e-4, "dbias " + what);
        }
      }
    }
  }
}

// Half input and output with fp32 parameters (O1 after a half convolution, O2's
// keep_batchnorm_fp32): the backward is the derivative of the forward that runs in half. The
// loss perturbs an f32 copy of x that is rounded to half inside, by a step that keeps x +- step
// exactly representable (|x| < 8 and a step of 2^-3 or 2^-2); the half rounding of y makes the
// differences noisy, so the step is large (BN is close to linear in one element of a batch) and
// the tolerance a few percent.
BOOST_AUTO_TEST_CASE(half_backward_matches_central_differences) {
  Generator generator(6);
  BatchNormParams params;
  params.eps = 1e-3f;
  for (const DType dtype : {DType::f16, DType::bf16}) {
    const float step = dtype == DType::f16 ? 0.125f : 0.25f;
    const double tol = dtype == DType::f16 ? 2e-2 : 5e-2;
    for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{4, 2, 3, 3}}) {
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape);
      const Tensor x_half = shifted_input(shape, dtype, generator);
      Tensor x = Tensor::from_floats(shape, x_half.to_floats(), DType::f32);
      Tensor weight = random_tensor({shape[1]}, DType::f32, generator, 0.5f, 1.5f);
      Tensor bias = random_tensor({shape[1]}, DType::f32, generator);
      Tensor running_mean = Tensor::zeros({shape[1]}, DType::f32);
      Tensor running_var = Tensor::zeros({shape[1]}, DType::f32);
      const Tensor dy = random_tensor(shape, dtype, generator);
      const auto weights = to_doubles(dy);
      const auto loss = [&] {
        const BatchNormTrainResult r = batch_norm2d_train_forward(
            cast(x, dtype), weight, bias, running_mean, running_var, params);
        BOOST_TEST_REQUIRE((r.y.dtype() == dtype));
        return weighted_sum(r.y, weights);
      };
      const auto numerical_dx = numerical_gradient(loss, x, step);
      const auto numerical_dw = numerical_gradient(loss, weight, step);
      const auto numerical_db = numerical_gradient(loss, bias, step);

      Tensor dweight = Tensor::zeros({shape[1]}, DType::f32);
      Tensor dbias = Tensor::zeros({shape[1]}, DType::f32);
      const BatchNormTrainResult forward =
          batch_norm2d_train_forward(x_half, weight, bias, running_mean, running_var, params);
      const Tensor dx = batch_norm2d_backward(x_half, weight, dy, forward.saved, dweight, dbias);
      BOOST_TEST((dx.dtype() == dtype));
      BOOST_TEST((dweight.dtype() == DType::f32));
      check_close(dx, numerical_dx, tol, tol, "dx vs central differences " + what);
      check_close(dweight, numerical_dw, tol, tol, "dweight vs central differences " + what);
      check_close(dbias, numerical_db, tol, tol, "dbias vs central differences " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(results_do_not_depend_on_the_thread_count) {
  Generator generator(5);
  const Shape shape{8, 4, 16, 16};
  for (const DType dtype : kFloatTypes) {
    const Tensor x = shifted_input(shape, dtype, generator);
    const Tensor weight = random_tensor({4}, DType::f32, generator, 0.5f, 1.5f);
    const Tensor bias = random_tensor({4}, DType::f32, generator);
    const Tensor dy = random_tensor(shape, dtype, generator);
    Tensor y[2], dx[2], dweight[2], dbias[2], running_var[2];
    int run = 0;
    for (const int threads : {1, 3}) {
      set_cpu_threads(threads);
      Tensor running_mean = Tensor::zeros({4}, DType::f32);
      running_var[run] = Tensor::zeros({4}, DType::f32);
      const BatchNormTrainResult forward =
          batch_norm2d_train_forward(x, weight, bias, running_mean, running_var[run], {});
      dweight[run] = Tensor::zeros({4}, DType::f32);
      dbias[run] = Tensor::zeros({4}, DType::f32);
      y[run] = forward.y;
      dx[run] = batch_norm2d_backward(x, weight, dy, forward.saved, dweight[run], dbias[run]);
      ++run;
    }
    BOOST_TEST(same_bits(y[0], y[1]), dtype_name(dtype));
    BOOST_TEST(same_bits(running_var[0], running_var[1]), dtype_name(dtype));
    BOOST_TEST(same_bits(dx[0], dx[1]), dtype_name(dtype));
    BOOST_TEST(same_bits(dweight[0], dweight[1]), dtype_name(dtype));
    BOOST_TEST(same_bits(dbias[0], dbias[1]), dtype_name(dtype));
  }
}

BOOST_AUTO_TEST_CASE(rejects_bad_inputs) {
  const Tensor x = Tensor::zeros({2, 3, 4, 4}, DType::f32);
  const Tensor c3 = Tensor::zeros({3}, DType::f32);
  Tensor mean = Tensor::zeros({3}, DType::f32), var = Tensor::zeros({3}, DType::f32);
  const auto names_op = [](const Error& error) {
    return std::string(error.what()).find("batch_norm2d") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(
      batch_norm2d_train_forward(Tensor::zeros({2, 3, 16}, DType::f32), c3, c3, mean, var, {}),
      Error, names_op);
  BOOST_CHECK_EXCEPTION(
      batch_norm2d_train_forward(x, Tensor::zeros({4}, DType::f32), c3, mean, var, {}), Error,
      names_op);
  // Half parameters only with an input of their own dtype.
  BOOST_CHECK_EXCEPTION(
      batch_norm2d_train_forward(x, Tensor::zeros({3}, DType::f16), c3, mean, var, {}), Error,
      names_op);
  // One value per channel has no variance to normalise by.
  BOOST_CHECK_EXCEPTION(
      batch_norm2d_train_forward(Tensor::zeros({1, 3, 1, 1}, DType::f32), c3, c3, mean, var, {}),
      Error, names_op);
  BOOST_CHECK_EXCEPTION(
      batch_norm2d_eval_forward(Tensor::zeros({2, 3, 4, 4}, DType::i32), c3, c3, mean, var, {}),
      Error, names_op);
  BOOST_TEST(mean.to_floats() == std::vector<float>(3, 0.0f), "a failed call leaves state alone");

  const BatchNormTrainResult forward = batch_norm2d_train_forward(x, c3, c3, mean, var, {});
  Tensor dweight = Tensor::zeros({3}, DType::f32), dbias = Tensor::zeros({3}, DType::f32);
  BOOST_CHECK_EXCEPTION(batch_norm2d_backward(x, c3, Tensor::zeros({2, 3, 4, 5}, DType::f32),
                                              forward.saved, dweight, dbias),
                        Error, names_op);
  BOOST_CHECK_EXCEPTION(batch_norm2d_backward(x, c3, x, BatchNormSaved{}, dweight, dbias), Error,
                        names_op);
  // The ReLU's output must match x's shape and be floating.
  BOOST_CHECK_EXCEPTION(batch_norm2d_backward(x, c3, x, forward.saved, dweight, dbias,
                                              Tensor::zeros({2, 3, 4, 5}, DType::f32)),
                        Error, names_op);
  BOOST_CHECK_EXCEPTION(batch_norm2d_backward(x, c3, x, forward.saved, dweight, dbias,
                                              Tensor::zeros({2, 3, 4, 4}, DType::i32)),
                        Error, names_op);
}

// The fused ReLU (params.relu, and relu_output in the backward) against the unfused ops: the
// same bits in every dtype, with a NaN in dy (masked or not) and a mask of another dtype.
BOOST_AUTO_TEST_CASE(fused_relu_is_bitwise_the_unfused_ops) {
  Generator generator(7);
  BatchNormParams plain;
  BatchNormParams fused;
  fused.relu = true;
  for (const DType dtype : kFloatTypes) {
    for (const DType param_dtype : {DType::f32, dtype}) {
      for (const Shape& shape : kShapes) {
        const std::string what = case_name(dtype, param_dtype, shape);
        const auto [x, weight, bias, mean0, var0] =
            random_inputs(shape, dtype, param_dtype, generator);
        Tensor mean[2] = {mean0.clone(), mean0.clone()}, var[2] = {var0.clone(), var0.clone()};
        const BatchNormTrainResult unfused =
            batch_norm2d_train_forward(x, weight, bias, mean[0], var[0], plain);
        const BatchNormTrainResult result =
            batch_norm2d_train_forward(x, weight, bias, mean[1], var[1], fused);
        const Tensor y = relu_forward(unfused.y);
        BOOST_TEST(same_bits(result.y, y), "train y " << what);
        BOOST_TEST(same_bits(result.saved.invstd, unfused.saved.invstd), "invstd " << what);
        BOOST_TEST(same_bits(mean[1], mean[0]), "running mean " << what);
        BOOST_TEST(same_bits(var[1], var[0]), "running var " << what);
        BOOST_TEST(
            same_bits(batch_norm2d_eval_forward(x, weight, bias, mean0, var0, fused),
                      relu_forward(batch_norm2d_eval_forward(x, weight, bias, mean0, var0, plain))),
            "eval y " << what);

        // A mask of x's dtype (the fused output) and of f32 (a promoted residual sum).
        for (const Tensor& mask : {result.y, cast(result.y, DType::f32)}) {
          for (const DType dy_dtype : {dtype, DType::f32}) {
            const std::string grads =
                what + " mask " + dtype_name(mask.dtype()) + " dy " + dtype_name(dy_dtype);
            std::vector<float> dy_values = random_tensor(shape, dy_dtype, generator).to_floats();
            dy_values[1] = NAN;  // masked or not, as relu_backward does
            const Tensor dy = Tensor::from_floats(shape, dy_values, dy_dtype);
            Tensor dweight[2], dbias[2];
            for (int k = 0; k < 2; ++k) {
              dweight[k] = Tensor::zeros({shape[1]}, param_dtype);
              dbias[k] = Tensor::zeros({shape[1]}, param_dtype);
            }
            const Tensor dx_unfused = batch_norm2d_backward(x, weight, relu_backward(mask, dy),
                                                            unfused.saved, dweight[0], dbias[0]);
            const Tensor dx =
                batch_norm2d_backward(x, weight, dy, result.saved, dweight[1], dbias[1], mask);
            BOOST_TEST(same_bits(dx, dx_unfused), "dx " << grads);
            BOOST_TEST(same_bits(dweight[1], dweight[0]), "dweight " << grads);
            BOOST_TEST(same_bits(dbias[1], dbias[0]), "dbias " << grads);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(fused_relu_matches_float64_reference) {
  Generator generator(8);
  BatchNormParams params;
  params.relu = true;
  params.eps = 1e-3f;
  for (const DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape);
      const Tensor x = shifted_input(shape, dtype, generator);
      const Tensor weight = random_tensor({shape[1]}, DType::f32, generator, 0.5f, 1.5f);
      const Tensor bias = random_tensor({shape[1]}, DType::f32, generator);
      Tensor running_mean = Tensor::zeros({shape[1]}, DType::f32);
      Tensor running_var = Tensor::zeros({shape[1]}, DType::f32);
      const BatchNormTrainResult result =
          batch_norm2d_train_forward(x, weight, bias, running_mean, running_var, params);
      BOOST_TEST((result.y.dtype() == dtype));

      const Reference reference(shape);
      const auto xv = to_doubles(x);
      std::vector<double> mean, variance;
      reference.statistics(xv, mean, variance);
      std::vector<double> expected =
          reference.normalize(xv, mean, variance, to_doubles(weight), to_doubles(bias), params.eps);
      for (auto& value : expected)
        value = std::max(0.0, value);
      check_close(result.y, expected, dtype_tolerance(dtype), kAtol, "relu y " + what);

      // d/dx of sum(dy * relu(bn(x))) = bn's backward of dy masked by y > 0.
      for (const DType dy_dtype : {dtype, DType::f32}) {
        const Tensor dy = random_tensor(shape, dy_dtype, generator);
        Tensor dweight = Tensor::zeros({shape[1]}, DType::f32);
        Tensor dbias = Tensor::zeros({shape[1]}, DType::f32);
        const Tensor dx =
            batch_norm2d_backward(x, weight, dy, result.saved, dweight, dbias, result.y);
        BOOST_TEST((dx.dtype() == dtype));
        std::vector<double> masked = to_doubles(dy);
        const auto yv = to_doubles(result.y);
        for (std::size_t i = 0; i < masked.size(); ++i)
          masked[i] = yv[i] > 0.0 ? masked[i] : 0.0;
        const auto exact = reference.backward(xv, to_doubles(weight), masked, params.eps);
        const double rtol = dtype == DType::f32 ? 1e-4 : dtype_tolerance(dtype);
        const double atol = dtype == DType::f32 ? kAtol : 1e-4;
        const std::string grads = what + " dy " + dtype_name(dy_dtype);
        check_close(dx, exact.dx, rtol, atol, "relu dx " + grads);
        check_close(dweight, exact.dweight, 1e-4, atol, "relu dweight " + grads);
        check_close(dbias, exact.dbias, 1e-4, atol, "relu dbias " + grads);
      }
    }
  }
}

// Biases far on either side of the kink (gamma * |xhat| stays below them) keep every ReLU input
// at least 0.5 from zero, so central differences see a smooth function.
BOOST_AUTO_TEST_CASE(fused_relu_backward_matches_central_differences) {
  Generator generator(9);
  BatchNormParams params;
  params.relu = true;
  params.eps = 1e-3f;
  const Shape shape{2, 4, 3, 3};  // 18 values per channel: |xhat| <= sqrt(17) < 4.2
  Tensor x = shifted_input(shape, DType::f32, generator);
  Tensor weight = random_tensor({4}, DType::f32, generator, 0.1f, 0.2f);
  Tensor bias = Tensor::from_floats({4}, {1.5f, -1.5f, 1.4f, -1.6f}, DType::f32);
  const Tensor dy = random_tensor(shape, DType::f32, generator);
  const CentralDifferences numerical = central_differences(x, weight, bias, dy, params);
  Tensor dweight = Tensor::zeros({4}, DType::f32), dbias = Tensor::zeros({4}, DType::f32);
  const Tensor dx = batch_norm2d_backward(x, weight, dy, numerical.forward.saved, dweight, dbias,
                                          numerical.forward.y);
  check_close(dx, numerical.dx, 2e-3, 2e-3, "relu dx vs central differences");
  check_close(dweight, numerical.dweight, 2e-3, 2e-3, "relu dweight vs central differences");
  check_close(dbias, numerical.dbias, 2e-3, 2e-3, "relu dbias vs central differences");
  // Half the channels are off: their parameter gradients are exactly zero.
  BOOST_TEST(dbias.to_floats()[1] == 0.0f);
  BOOST_TEST(dweight.to_floats()[3] == 0.0f);
}

BOOST_AUTO_TEST_SUITE_END()
