#include "core/ops/softmax_cross_entropy.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

Tensor random_labels(std::int64_t rows, std::int64_t classes, Generator& generator) {
  std::vector<float> labels(static_cast<std::size_t>(rows));
  for (auto& label : labels)
    label = static_cast<float>(generator.below(classes));
  return Tensor::from_floats({rows}, labels, DType::i32);
}

// Softmax probabilities and the mean cross-entropy in float64 (log-sum-exp with the maximum
// taken out, so large logits are fine). With label smoothing eps, PyTorch's
// CrossEntropyLoss(label_smoothing=eps): the target q = (1 - eps) * onehot + eps / C, a row's
// loss -sum_k q_k log p_k.
struct Reference {
  std::vector<double> probabilities;
  double loss = 0.0;
};

Reference reference(const std::vector<double>& logits, const std::vector<float>& labels,
                    std::int64_t classes, double label_smoothing = 0.0) {
  Reference r;
  const auto rows = static_cast<std::int64_t>(labels.size());
  r.probabilities.resize(logits.size());
  for (std::int64_t n = 0; n < rows; ++n) {
    const double* row = logits.data() + n * classes;
    double max = row[0];
    for (std::int64_t c = 1; c < classes; ++c)
      max = std::max(max, row[c]);
    double sum = 0.0;
    for (std::int64_t c = 0; c < classes; ++c)
      sum += std::exp(row[c] - max);
    for (std::int64_t c = 0; c < classes; ++c)
      r.probabilities[n * classes + c] = std::exp(row[c] - max) / sum;
    const double log_sum_exp = max + std::log(sum);
    for (std::int64_t c = 0; c < classes; ++c) {
      const double target =
          (c == static_cast<std::int64_t>(labels[n]) ? 1.0 - label_smoothing : 0.0) +
          label_smoothing / static_cast<double>(classes);
      r.loss += target * (log_sum_exp - row[c]);  // -q_c log p_c
    }
  }
  r.loss /= static_cast<double>(rows);
  return r;
}

// scale * (p - q) / rows in float64: the gradient of the mean (smoothed) loss, scaled.
std::vector<double> reference_gradient(const Reference& exact, const std::vector<float>& labels,
                                       std::int64_t classes, double label_smoothing, double scale,
                                       double rows) {
  std::vector<double> gradient = exact.probabilities;
  for (std::size_t i = 0; i < gradient.size(); ++i) {
    const bool at_label = static_cast<float>(i % static_cast<std::size_t>(classes)) ==
                          labels[i / static_cast<std::size_t>(classes)];
    const double target =
        (at_label ? 1.0 - label_smoothing : 0.0) + label_smoothing / static_cast<double>(classes);
    gradient[i] = (gradient[i] - target) * scale / rows;
  }
  return gradient;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(softmax_cross_entropy, TwoThreads)

BOOST_AUTO_TEST_CASE(forward_matches_float64_reference_in_every_dtype) {
  Generator generator(1);
  for (const DType dtype : kFloatTypes) {
    // The last shape is large enough for the thread pool; the offset tests stability.
    for (const Shape& shape : {Shape{1, 1}, Shape{3, 10}, Shape{7, 5}, Shape{512, 100}}) {
      for (const float offset : {0.0f, 1000.0f}) {
        const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(shape) +
                                 " offset " + std::to_string(offset);
        const Tensor logits = random_tensor(shape, dtype, generator, offset - 8.0f, offset + 8.0f);
        const Tensor labels = random_labels(shape[0], shape[1], generator);
        const SoftmaxCrossEntropyResult result = softmax_cross_entropy_forward(logits, labels);
        BOOST_TEST((result.loss.dtype() == DType::f32));
        BOOST_TEST((result.probabilities.dtype() == DType::f32));
        BOOST_TEST((result.probabilities.shape() == shape));
        const Reference expected = reference(to_doubles(logits), labels.to_floats(), shape[1]);
        // fp32 throughout: the result is within fp32 rounding of the float64 one.
        check_close(result.loss, {expected.loss}, 1e-5, 1e-5, "loss " + what);
        check_close(result.probabilities, expected.probabilities, 1e-5, 1e-7,
                    "probabilities " + what);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_central_differences) {
  Generator generator(2);
  Tensor logits = random_tensor({4, 6}, DType::f32, generator, -3.0f, 3.0f);
  const Tensor labels = random_labels(4, 6, generator);
  const auto loss = [&] {
    return static_cast<double>(softmax_cross_entropy_forward(logits, labels).loss.to_floats()[0]);
  };
  const auto numerical = numerical_gradient(loss, logits, 1e-2f);
  const SoftmaxCrossEntropyResult result = softmax_cross_entropy_forward(logits, labels);
  const Tensor dlogits =
      softmax_cross_entropy_backward(result.probabilities, labels, 1.0f, DType::f32);
  check_close(dlogits, numerical, 1e-3, 1e-4, "dlogits vs central differences");
}

BOOST_AUTO_TEST_CASE(backward_is_scaled_and_rounded_once_in_the_logits_dtype) {
  Generator generator(3);
  for (const DType dtype : kFloatTypes) {
    for (const float scale : {1.0f, 65536.0f}) {
      const Tensor logits = random_tensor({64, 10}, dtype, generator, -4.0f, 4.0f);
      const Tensor labels = random_labels(64, 10, generator);
      const auto label_values = labels.to_floats();
      const SoftmaxCrossEntropyResult result = softmax_cross_entropy_forward(logits, labels);
      const Tensor dlogits =
          softmax_cross_entropy_backward(result.probabilities, labels, scale, dtype);
      BOOST_TEST((dlogits.dtype() == dtype));
      // d(mean loss)/dlogit = (p - onehot) / N, times the loss scale.
      const Reference exact = reference(to_doubles(logits), label_values, 10);
      std::vector<double> expected = exact.probabilities;
      for (std::size_t n = 0; n < label_values.size(); ++n)
        expected[n * 10 + static_cast<std::size_t>(label_values[n])] -= 1.0;
      for (auto& value : expected)
        value *= scale / 64.0;
      check_close(dlogits, expected, dtype_tolerance(dtype), 1e-7 * scale,
                  std::string("dlogits ") + dtype_name(dtype) + " scale " + std::to_string(scale));
    }
  }
  // A loss scale too large for f16 overflows to inf, which the scaler must see.
  const Tensor logits = Tensor::from_floats({1, 2}, {0.0f, 0.0f}, DType::f16);
  const Tensor labels = Tensor::from_floats({1}, {0.0f}, DType::i32);
  const auto result = softmax_cross_entropy_forward(logits, labels);
  const auto dlogits =
      softmax_cross_entropy_backward(result.probabilities, labels, 1e6f, DType::f16).to_floats();
  BOOST_TEST(std::isinf(dlogits[0]));
  BOOST_TEST(std::isinf(dlogits[1]));
}

BOOST_AUTO_TEST_CASE(non_finite_logits_give_a_non_finite_loss) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor labels = Tensor::from_floats({1}, {1.0f}, DType::i32);
  for (const float bad : {nan, inf}) {
    for (const DType dtype : kFloatTypes) {
      const Tensor logits = Tensor::from_floats({1, 3}, {0.5f, bad, -1.0f}, dtype);
      const float loss = softmax_cross_entropy_forward(logits, labels).loss.to_floats()[0];
      BOOST_TEST(!std::isfinite(loss), dtype_name(dtype) << " logit " << bad);
    }
  }
}

BOOST_AUTO_TEST_CASE(count_correct_takes_the_first_maximum_and_nan_as_largest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dtype : kFloatTypes) {
    const Tensor logits = Tensor::from_floats({4, 3},
                                              {0.1f, 0.9f, 0.3f,   // argmax 1
                                               2.0f, 2.0f, 1.0f,   // tie: first, 0
                                               -1.0f, nan, 5.0f,   // NaN wins: 1
                                               0.0f, 0.0f, 0.5f},  // argmax 2
                                              dtype);
    BOOST_TEST(count_correct(logits, Tensor::from_floats({4}, {1, 0, 1, 2}, DType::i32)) == 4,
               dtype_name(dtype));
    BOOST_TEST(count_correct(logits, Tensor::from_floats({4}, {0, 1, 2, 0}, DType::i32)) == 0,
               dtype_name(dtype));
  }
}

// The training step's fused op against the three ops it replaces in the trainer: the same bits
// (loss, gradient, both tally fields), so runs and their digests do not change.
BOOST_AUTO_TEST_CASE(the_fused_step_equals_forward_backward_and_tally_bit_for_bit) {
  Generator generator(17);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dtype : kFloatTypes) {
    for (const std::int64_t classes : {std::int64_t{10}, std::int64_t{1000}}) {
      for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{67}, std::int64_t{300}}) {
        for (const float scale : {1.0f, 65536.0f}) {
          BOOST_TEST_CONTEXT(dtype_name(dtype)
                             << ", " << rows << "x" << classes << ", scale " << scale) {
            std::vector<float> values(static_cast<std::size_t>(rows * classes));
            for (auto& value : values)
              value = static_cast<float>(16.0 * generator.uniform() - 8.0);
            // A tie (the first maximum wins) and, with several rows, a NaN row.
            values[1] = values[0];
            if (rows > 1) values[static_cast<std::size_t>(classes + 2)] = nan;
            const Tensor logits = Tensor::from_floats({rows, classes}, values, dtype);
            const Tensor labels = random_labels(rows, classes, generator);
            const Tensor loss_scale = Tensor::from_floats({1}, {scale});
            const StepTally start{123.25, 7};

            Tensor expected_tally = make_step_tally(Device::cpu(), start);
            const SoftmaxCrossEntropyResult forward = softmax_cross_entropy_forward(logits, labels);
            const Tensor expected_dlogits =
                softmax_cross_entropy_backward(forward.probabilities, labels, loss_scale, dtype);
            add_to_step_tally(expected_tally, forward.loss, logits, labels);

            Tensor tally = make_step_tally(Device::cpu(), start);
            const SoftmaxCrossEntropyStep fused =
                softmax_cross_entropy_step(logits, labels, loss_scale, tally);
            BOOST_TEST(same_bytes(fused.loss, forward.loss));
            BOOST_TEST(same_bytes(fused.dlogits, expected_dlogits));
            BOOST_TEST(same_bytes(tally, expected_tally));
          }
        }
      }
    }
  }
}

// Gradient accumulation: a micro-batch's gradient is that of the whole step's mean, divided
// by the step's rows, not its own. Against the float64 reference, and bit for bit against the
// formula's fp32 expression from the forward op's probabilities (the fused op's, bit for bit);
// the loss and the tally stay the micro-batch's own.
BOOST_AUTO_TEST_CASE(the_fused_step_divides_the_gradient_by_the_rows_of_its_step) {
  Generator generator(19);
  for (const DType dtype : kFloatTypes) {
    for (const float scale : {1.0f, 65536.0f}) {
      const std::int64_t rows = 16, classes = 10;
      for (const std::int64_t step_rows : {rows, std::int64_t{64}, std::int64_t{67}}) {
        BOOST_TEST_CONTEXT(dtype_name(dtype) << ", scale " << scale << ", step of " << step_rows) {
          const Tensor logits = random_tensor({rows, classes}, dtype, generator, -4.0f, 4.0f);
          const Tensor labels = random_labels(rows, classes, generator);
          const auto label_values = labels.to_floats();
          const Tensor loss_scale = Tensor::from_floats({1}, {scale});
          const StepTally start{2.5, 1};
          Tensor tally = make_step_tally(Device::cpu(), start);
          const SoftmaxCrossEntropyStep fused =
              softmax_cross_entropy_step(logits, labels, loss_scale, tally, step_rows);

          const Reference exact = reference(to_doubles(logits), label_values, classes);
          std::vector<double> expected = exact.probabilities;
          for (std::size_t n = 0; n < label_values.size(); ++n)
            expected[n * classes + static_cast<std::size_t>(label_values[n])] -= 1.0;
          for (auto& value : expected)
            value *= scale / static_cast<double>(step_rows);
          check_close(fused.dlogits, expected, dtype_tolerance(dtype), 1e-7 * scale, "dlogits");

          const SoftmaxCrossEntropyResult forward = softmax_cross_entropy_forward(logits, labels);
          const std::vector<float> p = forward.probabilities.to_floats();
          const float factor = scale / static_cast<float>(step_rows);
          std::vector<float> formula(p.size());
          for (std::size_t i = 0; i < p.size(); ++i) {
            const bool at_label = static_cast<float>(i % classes) == label_values[i / classes];
            formula[i] = at_label ? (p[i] - 1.0f) * factor : p[i] * factor;
          }
          BOOST_TEST(
              same_bytes(fused.dlogits, Tensor::from_floats({rows, classes}, formula, dtype)));

          BOOST_TEST(same_bytes(fused.loss, forward.loss));
          Tensor expected_tally = make_step_tally(Device::cpu(), start);
          add_to_step_tally(expected_tally, forward.loss, logits, labels);
          BOOST_TEST(same_bytes(tally, expected_tally));
          if (step_rows == rows) {
            Tensor default_tally = make_step_tally(Device::cpu(), start);
            BOOST_TEST(same_bytes(
                softmax_cross_entropy_step(logits, labels, loss_scale, default_tally).dlogits,
                fused.dlogits));
          }
        }
      }
    }
  }
  // A micro-batch is part of its step: fewer step rows than its own is refused.
  const Tensor logits = Tensor::zeros({4, 3}, DType::f32);
  Tensor tally = make_step_tally(Device::cpu());
  BOOST_CHECK_EXCEPTION(
      softmax_cross_entropy_step(logits, Tensor::from_floats({4}, {0, 1, 2, 0}, DType::i32),
                                 Tensor::from_floats({1}, {1.0f}), tally, 3),
      Error, [](const Error& error) {
        return std::string(error.what()).find("gradient_rows 3") != std::string::npos;
      });
}

BOOST_AUTO_TEST_CASE(the_fused_step_checks_its_inputs) {
  const Tensor logits = Tensor::zeros({2, 3}, DType::f32);
  const Tensor labels = Tensor::from_floats({2}, {0, 1}, DType::i32);
  const Tensor scale = Tensor::from_floats({1}, {1.0f});
  Tensor tally = make_step_tally(Device::cpu());
  const auto names = [](const std::string& what) {
    return [what](const Error& error) {
      const std::string message = error.what();
      return message.find("softmax_cross_entropy_step") != std::string::npos &&
             message.find(what) != std::string::npos;
    };
  };
  BOOST_CHECK_EXCEPTION(softmax_cross_entropy_step(
                            logits, Tensor::from_floats({2}, {0, 3}, DType::i32), scale, tally),
                        Error, names("label 3"));
  BOOST_CHECK_EXCEPTION(
      softmax_cross_entropy_step(logits, labels, Tensor::from_floats({2}, {1, 1}), tally), Error,
      names("loss_scale"));
  Tensor wrong = Tensor::zeros({2}, DType::i32);
  BOOST_CHECK_EXCEPTION(softmax_cross_entropy_step(logits, labels, scale, wrong), Error,
                        names("tally"));
  BOOST_TEST(read_step_tally(tally).correct == 0u, "nothing was added by a refused call");
}

BOOST_AUTO_TEST_CASE(rejects_bad_inputs) {
  const Tensor logits = Tensor::zeros({2, 3}, DType::f32);
  const auto names_op = [](const Error& error) {
    return std::string(error.what()).find("softmax_cross_entropy") != std::string::npos;
  };
  BOOST_CHECK_EXCEPTION(
      softmax_cross_entropy_forward(logits, Tensor::from_floats({2}, {0, 3}, DType::i32)), Error,
      names_op);
  BOOST_CHECK_EXCEPTION(
      softmax_cross_entropy_forward(logits, Tensor::from_floats({2}, {0, -1}, DType::i32)), Error,
      names_op);
  BOOST_CHECK_EXCEPTION(
      softmax_cross_entropy_forward(logits, Tensor::from_floats({2}, {0, 1}, DType::f32)), Error,
      names_op);
  BOOST_CHECK_EXCEPTION(
      softmax_cross_entropy_forward(logits, Tensor::from_floats({3}, {0, 1, 2}, DType::i32)), Error,
      names_op);
  BOOST_CHECK_EXCEPTION(softmax_cross_entropy_forward(Tensor::zeros({0, 3}, DType::f32),
                                                      Tensor::zeros({0}, DType::i32)),
                        Error, names_op);
  const Tensor labels = Tensor::from_floats({2}, {0, 1}, DType::i32);
  BOOST_CHECK_EXCEPTION(
      softmax_cross_entropy_backward(Tensor::zeros({2, 3}, DType::f16), labels, 1.0f, DType::f16),
      Error, names_op);
  BOOST_CHECK_EXCEPTION(softmax_cross_entropy_backward(logits, labels, 1.0f, DType::i32), Error,
                        names_op);
}

// Label smoothing (PyTorch's CrossEntropyLoss(label_smoothing=eps)) against the float64
// formula; the probabilities are the unsmoothed forward's, bit for bit.
BOOST_AUTO_TEST_CASE(label_smoothing_forward_matches_float64_reference_in_every_dtype) {
  Generator generator(23);
  for (const DType dtype : kFloatTypes) {
    for (const Shape& shape : {Shape{1, 1}, Shape{3, 10}, Shape{512, 100}}) {
      for (const float offset : {0.0f, 1000.0f}) {
        for (const float eps : {0.1f, 0.3f}) {
          BOOST_TEST_CONTEXT(dtype_name(dtype)
                             << " " << shape_str(shape) << " offset " << offset << " eps " << eps) {
            const Tensor logits =
                random_tensor(shape, dtype, generator, offset - 8.0f, offset + 8.0f);
            const Tensor labels = random_labels(shape[0], shape[1], generator);
            const SoftmaxCrossEntropyResult result =
                softmax_cross_entropy_forward(logits, labels, eps);
            const Reference expected =
                reference(to_doubles(logits), labels.to_floats(), shape[1], eps);
            check_close(result.loss, {expected.loss}, 1e-5, 1e-5, "smoothed loss");
            BOOST_TEST(same_bytes(result.probabilities,
                                  softmax_cross_entropy_forward(logits, labels).probabilities));
          }
        }
      }
    }
  }
}

// The gradient of the smoothed mean, scale * (p - q) / rows, from both backward overloads and
// from the fused step (also a micro-batch's share of a larger step).
BOOST_AUTO_TEST_CASE(label_smoothing_gradient_matches_float64_reference_in_every_dtype) {
  Generator generator(29);
  const std::int64_t rows = 64, classes = 10;
  for (const DType dtype : kFloatTypes) {
    for (const float scale : {1.0f, 65536.0f}) {
      for (const float eps : {0.1f, 0.3f}) {
        BOOST_TEST_CONTEXT(dtype_name(dtype) << ", scale " << scale << ", eps " << eps) {
          const Tensor logits = random_tensor({rows, classes}, dtype, generator, -4.0f, 4.0f);
          const Tensor labels = random_labels(rows, classes, generator);
          const auto label_values = labels.to_floats();
          const Tensor loss_scale = Tensor::from_floats({1}, {scale});
          const Reference exact = reference(to_doubles(logits), label_values, classes, eps);
          const double rtol = dtype_tolerance(dtype), atol = 1e-7 * scale;
          const std::vector<double> expected =
              reference_gradient(exact, label_values, classes, eps, scale, rows);

          const SoftmaxCrossEntropyResult forward =
              softmax_cross_entropy_forward(logits, labels, eps);
          check_close(
              softmax_cross_entropy_backward(forward.probabilities, labels, scale, dtype, eps),
              expected, rtol, atol, "backward");
          check_close(
              softmax_cross_entropy_backward(forward.probabilities, labels, loss_scale, dtype, eps),
              expected, rtol, atol, "backward with a scale tensor");
          Tensor tally = make_step_tally(Device::cpu());
          const SoftmaxCrossEntropyStep step =
              softmax_cross_entropy_step(logits, labels, loss_scale, tally, 0, eps);
          check_close(step.dlogits, expected, rtol, atol, "step");
          check_close(step.loss, {exact.loss}, 1e-5, 1e-5, "step loss");
          const std::int64_t step_rows = 4 * rows + 3;
          check_close(
              softmax_cross_entropy_step(logits, labels, loss_scale, tally, step_rows, eps).dlogits,
              reference_gradient(exact, label_values, classes, eps, scale,
                                 static_cast<double>(step_rows)),
              rtol, atol, "step of " + std::to_string(step_rows) + " rows");
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(label_smoothing_backward_matches_central_differences) {
  Generator generator(31);
  Tensor logits = random_tensor({4, 6}, DType::f32, generator, -3.0f, 3.0f);
  const Tensor labels = random_labels(4, 6, generator);
  const float eps = 0.3f;
  const auto loss = [&] {
    return static_cast<double>(
        softmax_cross_entropy_forward(logits, labels, eps).loss.to_floats()[0]);
  };
  const auto numerical = numerical_gradient(loss, logits, 1e-2f);
  const SoftmaxCrossEntropyResult result = softmax_cross_entropy_forward(logits, labels, eps);
  const Tensor dlogits =
      softmax_cross_entropy_backward(result.probabilities, labels, 1.0f, DType::f32, eps);
  check_close(dlogits, numerical, 1e-3, 1e-4, "smoothed dlogits vs central differences");
}

// The fused step's contract with smoothing too: the bits of forward, backward and tally, at
// any thread count; its gradient for a step of more rows is the formula's fp32 expression
// (softmax_cross_entropy.h: target off = eps / C, on = (1 - eps) + off).
BOOST_AUTO_TEST_CASE(the_fused_step_with_label_smoothing_equals_forward_backward_and_tally) {
  Generator generator(37);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const DType dtype : kFloatTypes) {
    for (const std::int64_t classes : {std::int64_t{10}, std::int64_t{1000}}) {
      for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{67}, std::int64_t{300}}) {
        for (const float eps : {0.1f, 0.3f}) {
          BOOST_TEST_CONTEXT(dtype_name(dtype)
                             << ", " << rows << "x" << classes << ", eps " << eps) {
            std::vector<float> values(static_cast<std::size_t>(rows * classes));
            for (auto& value : values)
              value = static_cast<float>(16.0 * generator.uniform() - 8.0);
            values[1] = values[0];
            if (rows > 1) values[static_cast<std::size_t>(classes + 2)] = nan;
            const Tensor logits = Tensor::from_floats({rows, classes}, values, dtype);
            const Tensor labels = random_labels(rows, classes, generator);
            const float scale = 65536.0f;
            const Tensor loss_scale = Tensor::from_floats({1}, {scale});
            const StepTally start{123.25, 7};

            Tensor expected_tally = make_step_tally(Device::cpu(), start);
            const SoftmaxCrossEntropyResult forward =
                softmax_cross_entropy_forward(logits, labels, eps);
            const Tensor expected_dlogits = softmax_cross_entropy_backward(
                forward.probabilities, labels, loss_scale, dtype, eps);
            add_to_step_tally(expected_tally, forward.loss, logits, labels);

            Tensor tally = make_step_tally(Device::cpu(), start);
            const SoftmaxCrossEntropyStep fused =
                softmax_cross_entropy_step(logits, labels, loss_scale, tally, 0, eps);
            BOOST_TEST(same_bytes(fused.loss, forward.loss));
            BOOST_TEST(same_bytes(fused.dlogits, expected_dlogits));
            BOOST_TEST(same_bytes(tally, expected_tally));

            set_cpu_threads(1);
            Tensor one_thread_tally = make_step_tally(Device::cpu(), start);
            const SoftmaxCrossEntropyStep one_thread =
                softmax_cross_entropy_step(logits, labels, loss_scale, one_thread_tally, 0, eps);
            set_cpu_threads(2);
            BOOST_TEST(same_bytes(one_thread.loss, fused.loss));
            BOOST_TEST(same_bytes(one_thread.dlogits, fused.dlogits));
            BOOST_TEST(same_bytes(one_thread_tally, tally));

            const std::int64_t step_rows = 3 * rows + 1;
            const std::vector<float> p = forward.probabilities.to_floats();
            const auto label_values = labels.to_floats();
            const float off = eps / static_cast<float>(classes);
            const float on = (1.0f - eps) + off;
            const float factor = scale / static_cast<float>(step_rows);
            std::vector<float> formula(p.size());
            for (std::size_t i = 0; i < p.size(); ++i) {
              const bool at_label = static_cast<float>(i % static_cast<std::size_t>(classes)) ==
                                    label_values[i / static_cast<std::size_t>(classes)];
              formula[i] = (p[i] - (at_label ? on : off)) * factor;
            }
            BOOST_TEST(same_bytes(
                softmax_cross_entropy_step(logits, labels, loss_scale, tally, step_rows, eps)
                    .dlogits,
                Tensor::from_floats({rows, classes}, formula, dtype)));
          }
        }
      }
    }
  }
}

// eps 0 is the default, and the unsmoothed arithmetic: a masked class (a -inf logit) leaves
// the loss finite, where smoothing's sum over every class makes it +inf, as PyTorch's does.
BOOST_AUTO_TEST_CASE(label_smoothing_0_is_the_unsmoothed_loss) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const DType dtype : kFloatTypes) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      const Tensor logits =
          Tensor::from_floats({2, 3}, {0.5f, -inf, 2.0f, 1.0f, -1.0f, 0.25f}, dtype);
      const Tensor labels = Tensor::from_floats({2}, {2, 0}, DType::i32);
      const Tensor scale = Tensor::from_floats({1}, {1024.0f});
      const SoftmaxCrossEntropyResult unsmoothed = softmax_cross_entropy_forward(logits, labels);
      const SoftmaxCrossEntropyResult zero = softmax_cross_entropy_forward(logits, labels, 0.0f);
      BOOST_TEST(std::isfinite(unsmoothed.loss.to_floats()[0]));
      BOOST_TEST(same_bytes(zero.loss, unsmoothed.loss));
      BOOST_TEST(
          same_bytes(softmax_cross_entropy_backward(zero.probabilities, labels, scale, dtype, 0.0f),
                     softmax_cross_entropy_backward(zero.probabilities, labels, scale, dtype)));
      Tensor tally = make_step_tally(Device::cpu());
      Tensor zero_tally = make_step_tally(Device::cpu());
      const SoftmaxCrossEntropyStep step = softmax_cross_entropy_step(logits, labels, scale, tally);
      const SoftmaxCrossEntropyStep zero_step =
          softmax_cross_entropy_step(logits, labels, scale, zero_tally, 0, 0.0f);
      BOOST_TEST(same_bytes(zero_step.loss, step.loss));
      BOOST_TEST(same_bytes(zero_step.dlogits, step.dlogits));
      BOOST_TEST(same_bytes(zero_tally, tally));

      const SoftmaxCrossEntropyResult smoothed =
          softmax_cross_entropy_forward(logits, labels, 0.1f);
      BOOST_TEST(smoothed.loss.to_floats()[0] == inf);
      for (const float gradient :
           softmax_cross_entropy_backward(smoothed.probabilities, labels, 1.0f, dtype, 0.1f)
               .to_floats())
        BOOST_TEST(std::isfinite(gradient));
    }
  }
}

BOOST_AUTO_TEST_CASE(label_smoothing_outside_0_1_is_refused) {
  const Tensor logits = Tensor::zeros({2, 3}, DType::f32);
  const Tensor labels = Tensor::from_floats({2}, {0, 1}, DType::i32);
  const Tensor scale = Tensor::from_floats({1}, {1.0f});
  const Tensor probabilities = softmax_cross_entropy_forward(logits, labels).probabilities;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::pair<float, const char*> bad[] = {
      {-0.1f, "-0.1"}, {1.0f, "1"}, {1.5f, "1.5"}, {nan, "nan"}, {inf, "inf"}};
  for (const auto& [eps, text] : bad) {
    const auto names = [text = std::string(text)](const char* op) {
      return [op, text](const Error& error) {
        const std::string message = error.what();
        return message.find(op) != std::string::npos &&
               message.find("label_smoothing must be in [0, 1), got " + text) != std::string::npos;
      };
    };
    BOOST_TEST_CONTEXT("eps " << text) {
      BOOST_CHECK_EXCEPTION(softmax_cross_entropy_forward(logits, labels, eps), Error,
                            names("softmax_cross_entropy_forward"));
      BOOST_CHECK_EXCEPTION(
          softmax_cross_entropy_backward(probabilities, labels, 1.0f, DType::f32, eps), Error,
          names("softmax_cross_entropy_backward"));
      BOOST_CHECK_EXCEPTION(
          softmax_cross_entropy_backward(probabilities, labels, scale, DType::f32, eps), Error,
          names("softmax_cross_entropy_backward"));
      Tensor tally = make_step_tally(Device::cpu());
      BOOST_CHECK_EXCEPTION(softmax_cross_entropy_step(logits, labels, scale, tally, 0, eps), Error,
                            names("softmax_cross_entropy_step"));
      BOOST_TEST(read_step_tally(tally).correct == 0u, "nothing was added by a refused call");
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
