// Token plus position embedding on the CPU: forward and backward against float64 references
// at f32, f16 and bf16 tables (gradients f32 or the tables' dtype), repeated tokens summed in
// position order, thread-count invariance, and bad tokens and shapes.
#include "core/ops/embedding.h"

#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// Tokens drawn from a few of the vocabulary's rows, so most rows repeat and some never occur.
Tensor random_tokens(std::int64_t batch, std::int64_t time, std::int64_t vocab,
                     Generator& generator) {
  Tensor tokens = Tensor::empty({batch, time}, DType::i32);
  for (std::int64_t i = 0; i < tokens.numel(); ++i)
    tokens.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(generator.below(static_cast<std::uint64_t>(vocab / 2 + 1)));
  return tokens;
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

struct Case {
  std::int64_t batch, time, channels, vocab, positions;
};
// One position; C above a 16-channel band and not a multiple of it; T < P.
const Case kCases[] = {{1, 1, 4, 3, 1}, {3, 7, 37, 11, 9}, {2, 16, 16, 5, 16}};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(embedding, TwoThreads)

BOOST_AUTO_TEST_CASE(forward_matches_float64_reference) {
  Generator generator(1);
  for (const DType dtype : kFloatTypes) {
    for (const Case& c : kCases) {
      const std::string what = std::string(dtype_name(dtype)) + " C " + std::to_string(c.channels);
      const Tensor tokens = random_tokens(c.batch, c.time, c.vocab, generator);
      const Tensor wte = random_tensor({c.vocab, c.channels}, dtype, generator);
      const Tensor wpe = random_tensor({c.positions, c.channels}, dtype, generator);
      const Tensor y = embedding_forward(tokens, wte, wpe);
      BOOST_TEST((y.shape() == Shape{c.batch, c.time, c.channels}));
      BOOST_TEST((y.dtype() == dtype));
      const auto te = to_doubles(wte), pe = to_doubles(wpe);
      std::vector<double> expected(static_cast<std::size_t>(y.numel()));
      for (std::int64_t i = 0; i < c.batch * c.time; ++i)
        for (std::int64_t j = 0; j < c.channels; ++j)
          expected[static_cast<std::size_t>(i * c.channels + j)] =
              te[static_cast<std::size_t>(tokens.data<std::int32_t>()[i] * c.channels + j)] +
              pe[static_cast<std::size_t>((i % c.time) * c.channels + j)];
      check_close(y, expected, dtype_tolerance(dtype), 0.0, "y " + what);
    }
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_float64_reference_and_adds_to_the_gradients) {
  Generator generator(2);
  for (const DType dtype : kFloatTypes) {
    for (const DType grad_dtype : {DType::f32, dtype}) {
      for (const Case& c : kCases) {
        const std::string what = std::string(dtype_name(dtype)) + " grads " +
                                 dtype_name(grad_dtype) + " C " + std::to_string(c.channels);
        const Tensor tokens = random_tokens(c.batch, c.time, c.vocab, generator);
        const Tensor dy = random_tensor({c.batch, c.time, c.channels}, dtype, generator);
        Tensor dwte = random_tensor({c.vocab, c.channels}, grad_dtype, generator);
        Tensor dwpe = random_tensor({c.positions, c.channels}, grad_dtype, generator);
        std::vector<double> expected_te = to_doubles(dwte), expected_pe = to_doubles(dwpe);
        const auto g = to_doubles(dy);
        for (std::int64_t i = 0; i < c.batch * c.time; ++i)
          for (std::int64_t j = 0; j < c.channels; ++j) {
            const double value = g[static_cast<std::size_t>(i * c.channels + j)];
            expected_te[static_cast<std::size_t>(tokens.data<std::int32_t>()[i] * c.channels +
                                                 j)] += value;
            expected_pe[static_cast<std::size_t>((i % c.time) * c.channels + j)] += value;
          }
        embedding_backward(dy, tokens, dwte, dwpe);
        // fp32 sums of up to B * T terms of magnitude 1, then one rounding into the gradient.
        const double rtol = grad_dtype == DType::f32 ? 1e-5 : dtype_tolerance(grad_dtype);
        check_close(dwte, expected_te, rtol, 1e-5, "dwte " + what);
        check_close(dwpe, expected_pe, rtol, 1e-5, "dwpe " + what);
      }
    }
  }
}

// The sums of a row run in position order from zero, then meet the gradient: the bits are
// those of that exact order, and the same on one thread as on two.
BOOST_AUTO_TEST_CASE(backward_sums_each_row_in_position_order_on_any_thread_count) {
  Generator generator(3);
  const Case c{4, 33, 40, 6, 40};
  const Tensor tokens = random_tokens(c.batch, c.time, c.vocab, generator);
  const Tensor dy = random_tensor({c.batch, c.time, c.channels}, DType::f32, generator, -3, 3);
  const Tensor dwte0 = random_tensor({c.vocab, c.channels}, DType::f32, generator);
  const Tensor dwpe0 = random_tensor({c.positions, c.channels}, DType::f32, generator);
  std::vector<float> sums(static_cast<std::size_t>(c.vocab * c.channels), 0.0f);
  for (std::int64_t i = 0; i < c.batch * c.time; ++i)
    for (std::int64_t j = 0; j < c.channels; ++j)
      sums[static_cast<std::size_t>(tokens.data<std::int32_t>()[i] * c.channels + j)] +=
          dy.data<float>()[i * c.channels + j];
  std::vector<float> expected = dwte0.to_floats();
  for (std::size_t i = 0; i < expected.size(); ++i)
    expected[i] += sums[i];
  Tensor runs[2];
  for (int threads : {1, 2}) {
    set_cpu_threads(threads);
    Tensor dwte = dwte0.clone(), dwpe = dwpe0.clone();
    embedding_backward(dy, tokens, dwte, dwpe);
    runs[threads - 1] = dwte;
  }
  BOOST_TEST(runs[0].to_floats() == expected, boost::test_tools::per_element());
  BOOST_TEST(same_bits(runs[0], runs[1]));
}

BOOST_AUTO_TEST_CASE(bad_tokens_and_shapes_are_errors) {
  Generator generator(4);
  const Tensor wte = random_tensor({5, 4}, DType::f32, generator);
  const Tensor wpe = random_tensor({3, 4}, DType::f32, generator);
  Tensor tokens = Tensor::zeros({1, 3}, DType::i32);
  tokens.data<std::int32_t>()[2] = 5;
  BOOST_CHECK_THROW(embedding_forward(tokens, wte, wpe), Error);
  tokens.data<std::int32_t>()[2] = -1;
  BOOST_CHECK_THROW(embedding_forward(tokens, wte, wpe), Error);
  // More positions than the position table holds.
  BOOST_CHECK_THROW(embedding_forward(Tensor::zeros({1, 4}, DType::i32), wte, wpe), Error);
  // Tables of different widths or dtypes.
  BOOST_CHECK_THROW(embedding_forward(Tensor::zeros({1, 2}, DType::i32), wte,
                                      random_tensor({3, 5}, DType::f32, generator)),
                    Error);
  BOOST_CHECK_THROW(embedding_forward(Tensor::zeros({1, 2}, DType::i32), wte,
                                      random_tensor({3, 4}, DType::f16, generator)),
                    Error);
}

BOOST_AUTO_TEST_SUITE_END()
