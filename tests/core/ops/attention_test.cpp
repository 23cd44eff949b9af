// Causal self-attention on the CPU: forward (y and the row log-sum-exp) and backward against a
// float64 reference that forms the whole softmax, for T = 1, 63, 64, 257 (around the 64-key
// block) and head sizes 32, 64, 128, at f32, f16 and bf16; central differences of the op's own
// forward; causality; thread-count invariance; argument checks.
#include "core/ops/attention.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// Attention in float64 from the definition, over the whole causal score matrix of each head.
struct Reference {
  AttentionGeometry g;
  std::vector<double> qkv;
  // The dropout factor of probability (b, h, t, j); none: 1.
  std::function<double(std::int64_t, std::int64_t, std::int64_t, std::int64_t)> z =
      [](std::int64_t, std::int64_t, std::int64_t, std::int64_t) { return 1.0; };

  std::int64_t width() const { return g.heads * g.head_dim; }
  double& at(std::vector<double>& data, std::int64_t b, std::int64_t t, std::int64_t part,
             std::int64_t h, std::int64_t d) const {
    return data[static_cast<std::size_t>((b * g.time + t) * 3 * width() + part * width() +
                                         h * g.head_dim + d)];
  }
  double in(std::int64_t b, std::int64_t t, std::int64_t part, std::int64_t h,
            std::int64_t d) const {
    return qkv[static_cast<std::size_t>((b * g.time + t) * 3 * width() + part * width() +
                                        h * g.head_dim + d)];
  }
  std::size_t out(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>((b * g.time + t) * width() + h * g.head_dim + d);
  }

  // p[t][j] of head (b, h), and the rows' log-sum-exp.
  std::vector<std::vector<double>> probabilities(std::int64_t b, std::int64_t h,
                                                 std::vector<double>* lse = nullptr) const {
    const double scale = 1.0 / std::sqrt(static_cast<double>(g.head_dim));
    std::vector<std::vector<double>> p(static_cast<std::size_t>(g.time));
    for (std::int64_t t = 0; t < g.time; ++t) {
      auto& row = p[static_cast<std::size_t>(t)];
      row.assign(static_cast<std::size_t>(t + 1), 0.0);
      double m = -INFINITY;
      for (std::int64_t j = 0; j <= t; ++j) {
        double s = 0.0;
        for (std::int64_t d = 0; d < g.head_dim; ++d)
          s += in(b, t, 0, h, d) * in(b, j, 1, h, d);
        row[static_cast<std::size_t>(j)] = s * scale;
        m = std::max(m, s * scale);
      }
      double sum = 0.0;
      for (double& s : row)
        sum += std::exp(s - m);
      for (double& s : row)
        s = std::exp(s - m) / sum;
      if (lse) lse->push_back(m + std::log(sum));
    }
    return p;
  }

  void forward(std::vector<double>& y, std::vector<double>& lse) const {
    y.assign(static_cast<std::size_t>(g.batch * g.time * width()), 0.0);
    lse.clear();
    for (std::int64_t b = 0; b < g.batch; ++b)
      for (std::int64_t h = 0; h < g.heads; ++h) {
        const auto p = probabilities(b, h, &lse);
        for (std::int64_t t = 0; t < g.time; ++t)
          for (std::int64_t j = 0; j <= t; ++j)
            for (std::int64_t d = 0; d < g.head_dim; ++d)
              y[out(b, t, h, d)] += p[static_cast<std::size_t>(t)][static_cast<std::size_t>(j)] *
                                    z(b, h, t, j) * in(b, j, 2, h, d);
      }
  }

  // The gradient of sum(dy * y) with respect to qkv, by the chain rule through the softmax.
  std::vector<double> backward(const std::vector<double>& dy) const {
    const double scale = 1.0 / std::sqrt(static_cast<double>(g.head_dim));
    std::vector<double> grad(qkv.size(), 0.0);
    for (std::int64_t b = 0; b < g.batch; ++b)
      for (std::int64_t h = 0; h < g.heads; ++h) {
        const auto p = probabilities(b, h);
        for (std::int64_t t = 0; t < g.time; ++t) {
          const auto& row = p[static_cast<std::size_t>(t)];
          std::vector<double> dp(row.size());
          double weighted = 0.0;
          for (std::int64_t j = 0; j <= t; ++j) {
            double sum = 0.0;
            const double factor = z(b, h, t, j);
            for (std::int64_t d = 0; d < g.head_dim; ++d) {
              sum += dy[out(b, t, h, d)] * in(b, j, 2, h, d);
              at(grad, b, j, 2, h, d) +=
                  row[static_cast<std::size_t>(j)] * factor * dy[out(b, t, h, d)];
            }
            dp[static_cast<std::size_t>(j)] = sum * factor;
            weighted += row[static_cast<std::size_t>(j)] * sum * factor;
          }
          for (std::int64_t j = 0; j <= t; ++j) {
            const double ds =
                row[static_cast<std::size_t>(j)] * (dp[static_cast<std::size_t>(j)] - weighted);
            for (std::int64_t d = 0; d < g.head_dim; ++d) {
              at(grad, b, t, 0, h, d) += scale * ds * in(b, j, 1, h, d);
              at(grad, b, j, 1, h, d) += scale * ds * in(b, t, 0, h, d);
            }
          }
        }
      }
    return grad;
  }
};

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

Tensor random_qkv(const AttentionGeometry& g, DType dtype, Generator& generator) {
  return random_tensor({g.batch, g.time, 3 * g.heads * g.head_dim}, dtype, generator, -1.5f, 1.5f);
}

std::string case_name(DType dtype, const AttentionGeometry& g) {
  return std::string(dtype_name(dtype)) + " B" + std::to_string(g.batch) + " T" +
         std::to_string(g.time) + " H" + std::to_string(g.heads) + " D" +
         std::to_string(g.head_dim);
}

// Absolute tolerance of results of magnitude about 1 computed in fp32 and rounded once.
double atol_of(DType dtype) {
  return dtype == DType::f32 ? 2e-5 : dtype_tolerance(dtype);
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(attention, TwoThreads)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_float64_reference) {
  Generator generator(1);
  std::vector<AttentionGeometry> cases;
  for (const std::int64_t time : {1, 63, 64, 257})
    for (const std::int64_t dim : {32, 64, 128})
      cases.push_back({time > 64 ? 1 : 2, time, dim == 32 ? 2 : 1, dim});
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (const AttentionGeometry& g : cases) {
      const std::string what = case_name(dtype, g);
      const Tensor qkv = random_qkv(g, dtype, generator);
      const Reference reference{g, to_doubles(qkv)};
      std::vector<double> y, lse;
      reference.forward(y, lse);
      const AttentionResult result = attention_forward(qkv, g.heads);
      BOOST_TEST((result.y.shape() == Shape{g.batch, g.time, g.heads * g.head_dim}));
      BOOST_TEST((result.lse.shape() == Shape{g.batch, g.heads, g.time}));
      check_close(result.y, y, dtype_tolerance(dtype), atol_of(dtype), "y " + what);
      check_close(result.lse, lse, 1e-5, 1e-5, "lse " + what);

      const Tensor dy = random_tensor(result.y.shape(), dtype, generator);
      const Tensor dqkv = attention_backward(dy, qkv, result.y, result.lse, g.heads);
      BOOST_TEST((dqkv.shape() == qkv.shape()));
      BOOST_TEST((dqkv.dtype() == dtype));
      // The op's delta uses y as stored (rounded to half), which the reference's exact y is
      // not: half cases get the output's rounding on top.
      check_close(dqkv, reference.backward(to_doubles(dy)), dtype_tolerance(dtype),
                  4 * atol_of(dtype), "dqkv " + what);
      // An evaluation forward saves nothing and gives the same output.
      const AttentionResult eval = attention_forward(qkv, g.heads, false);
      BOOST_TEST(!eval.lse.defined());
      BOOST_TEST(same_bits(eval.y, result.y), what);
    }
  }
}

// Dropout on the probabilities: the mask of core/ops/dropout.h's element (g, c), g the
// sequence's global row and c = (h T + t) T + j, drawn from the step count on the device.
BOOST_AUTO_TEST_CASE(dropout_matches_float64_reference_with_the_same_mask) {
  Generator generator(6);
  const float p = 0.3f;
  const std::uint64_t key = 0x1234567890abcdefull;
  Tensor step = Tensor::zeros({2}, DType::i32);
  step.data<std::int32_t>()[0] = 7;
  const AttentionDropout dropout{make_dropout_mask("test", p, key, 2, 3), step};
  for (const AttentionGeometry& g :
       {AttentionGeometry{2, 70, 2, 32}, AttentionGeometry{1, 9, 3, 8}}) {
    for (const DType dtype : {DType::f32, DType::bf16}) {
      const std::string what = case_name(dtype, g);
      const Tensor qkv = random_qkv(g, dtype, generator);
      Reference reference{g, to_doubles(qkv)};
      std::int64_t dropped = 0, visible = 0;
      reference.z = [&](std::int64_t b, std::int64_t h, std::int64_t t, std::int64_t j) {
        const std::int64_t c = (h * g.time + t) * g.time + j;
        const Philox4x32 bits = dropout_bits(key, 7, static_cast<std::uint32_t>(2 + 3 * b),
                                             static_cast<std::uint32_t>(c / 4));
        const bool drop = bits.v[c % 4] < dropout.mask.threshold;
        return drop ? 0.0 : static_cast<double>(dropout.mask.scale);
      };
      for (std::int64_t b = 0; b < g.batch; ++b)
        for (std::int64_t h = 0; h < g.heads; ++h)
          for (std::int64_t t = 0; t < g.time; ++t)
            for (std::int64_t j = 0; j <= t; ++j) {
              dropped += reference.z(b, h, t, j) == 0.0;
              ++visible;
            }
      BOOST_TEST(static_cast<double>(dropped) / static_cast<double>(visible) == 0.3,
                 boost::test_tools::tolerance(0.2));
      std::vector<double> y, lse;
      reference.forward(y, lse);
      const AttentionResult result = attention_forward(qkv, g.heads, true, &dropout);
      check_close(result.y, y, dtype_tolerance(dtype), 2 * atol_of(dtype), "y " + what);
      check_close(result.lse, lse, 1e-5, 1e-5, "lse " + what);
      const Tensor dy = random_tensor(result.y.shape(), dtype, generator);
      const Tensor dqkv = attention_backward(dy, qkv, result.y, result.lse, g.heads, &dropout);
      check_close(dqkv, reference.backward(to_doubles(dy)), dtype_tolerance(dtype),
                  6 * atol_of(dtype), "dqkv " + what);
      // Another step draws another mask.
      Tensor next = step.clone();
      next.data<std::int32_t>()[0] = 8;
      const AttentionDropout later{dropout.mask, next};
      BOOST_TEST(!same_bits(attention_forward(qkv, g.heads, false, &later).y, result.y), what);
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_central_differences_of_the_forward) {
  Generator generator(2);
  const AttentionGeometry g{2, 5, 2, 4};
  Tensor qkv = random_qkv(g, DType::f32, generator);
  const Tensor dy = random_tensor({g.batch, g.time, g.heads * g.head_dim}, DType::f32, generator);
  const std::vector<double> weights = to_doubles(dy);
  const auto loss = [&] { return weighted_sum(attention_forward(qkv, g.heads, false).y, weights); };
  const std::vector<double> numerical = numerical_gradient(loss, qkv, 1e-2f);
  const AttentionResult result = attention_forward(qkv, g.heads);
  const Tensor dqkv = attention_backward(dy, qkv, result.y, result.lse, g.heads);
  check_close(dqkv, numerical, 2e-2, 2e-3, "dqkv");
  // With dropout, whose mask stays put for a fixed step.
  const AttentionDropout dropout{make_dropout_mask("test", 0.25f, 99, 0, 1),
                                 Tensor::zeros({2}, DType::i32)};
  const auto dropped_loss = [&] {
    return weighted_sum(attention_forward(qkv, g.heads, false, &dropout).y, weights);
  };
  const std::vector<double> dropped_numerical = numerical_gradient(dropped_loss, qkv, 1e-2f);
  const AttentionResult dropped = attention_forward(qkv, g.heads, true, &dropout);
  check_close(attention_backward(dy, qkv, dropped.y, dropped.lse, g.heads, &dropout),
              dropped_numerical, 2e-2, 2e-3, "dqkv with dropout");
}

// A query row's output depends on its own and earlier positions only: changing the last
// position changes no earlier row.
BOOST_AUTO_TEST_CASE(later_positions_do_not_change_earlier_rows) {
  Generator generator(3);
  const AttentionGeometry g{1, 70, 2, 32};
  Tensor qkv = random_qkv(g, DType::f32, generator);
  const Tensor before = attention_forward(qkv, g.heads).y;
  float* last = qkv.data<float>() + (g.time - 1) * 3 * g.heads * g.head_dim;
  for (std::int64_t i = 0; i < 3 * g.heads * g.head_dim; ++i)
    last[i] += 1.0f;
  const Tensor after = attention_forward(qkv, g.heads).y;
  const std::int64_t earlier = (g.time - 1) * g.heads * g.head_dim;
  const std::vector<float> a = before.to_floats(), b = after.to_floats();
  BOOST_TEST(std::vector<float>(a.begin(), a.begin() + earlier) ==
                 std::vector<float>(b.begin(), b.begin() + earlier),
             boost::test_tools::per_element());
  BOOST_TEST(a.back() != b.back());
}

BOOST_AUTO_TEST_CASE(results_do_not_depend_on_the_thread_count) {
  Generator generator(4);
  const AttentionGeometry g{3, 40, 3, 16};
  const Tensor qkv = random_qkv(g, DType::bf16, generator);
  const Tensor dy = random_tensor({g.batch, g.time, g.heads * g.head_dim}, DType::bf16, generator);
  Tensor y[2], dqkv[2];
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    const AttentionResult result = attention_forward(qkv, g.heads);
    y[threads - 1] = result.y;
    dqkv[threads - 1] = attention_backward(dy, qkv, result.y, result.lse, g.heads);
  }
  BOOST_TEST(same_bits(y[0], y[1]));
  BOOST_TEST(same_bits(dqkv[0], dqkv[1]));
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_errors) {
  Generator generator(5);
  const Tensor qkv = random_tensor({1, 4, 12}, DType::f32, generator);
  BOOST_CHECK_THROW(attention_forward(qkv, 5), Error);  // 12 is not 3 * 5 * D
  BOOST_CHECK_THROW(attention_forward(qkv.reshape({4, 12}), 2), Error);
  const AttentionResult result = attention_forward(qkv, 2);
  BOOST_CHECK_THROW(attention_backward(random_tensor({1, 4, 4}, DType::f16, generator), qkv,
                                       result.y, result.lse, 2),
                    Error);
  BOOST_CHECK_THROW(attention_backward(result.y, qkv, result.y, Tensor(), 2), Error);
}

BOOST_AUTO_TEST_SUITE_END()
