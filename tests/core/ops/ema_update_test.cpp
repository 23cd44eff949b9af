// The weights' exponential moving average on the CPU: bit for bit against a scalar reference of
// the documented arithmetic (std::fma(decay, a, (1 - decay) * v) element by element) and within
// the rounding bound of the exact float64 formula, over f32, f16 and bf16 values of mixed sizes
// (an empty tensor, one element, odd sizes, enough for the thread pool to split); the same bits
// at 1, 2 and 3 threads; skip 0 (and -0) updates, skip 1, NaN and inf change nothing; decay 0
// copies the value; argument checks, made before anything changes.
#include "core/ops/ema_update.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
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

struct Pair {
  Tensor average, value;
};

// Averages and values of mixed shapes, the values' dtypes cycling through f32, f16 and bf16:
// 50001 + 40000 elements are over the pool's threshold, so two threads split the call, inside
// a tensor and across tensors.
std::vector<Pair> mixed_pairs(Generator& generator) {
  const Shape shapes[] = {{1}, {0}, {7}, {1023}, {3, 5, 7}, {50001}, {1025}, {40000}, {2}};
  std::vector<Pair> pairs;
  for (std::size_t i = 0; i < std::size(shapes); ++i) {
    pairs.push_back({random_tensor(shapes[i], DType::f32, generator, -2.0f, 2.0f),
                     random_tensor(shapes[i], kFloatTypes[i % 3], generator, -3.0f, 3.0f)});
  }
  return pairs;
}

std::vector<Pair> clone_averages(const std::vector<Pair>& pairs) {
  std::vector<Pair> copy;
  for (const Pair& p : pairs)
    copy.push_back({p.average.clone(), p.value});
  return copy;
}

std::vector<EmaTensors> list_of(std::vector<Pair>& pairs) {
  std::vector<EmaTensors> list;
  for (Pair& p : pairs)
    list.push_back({&p.average, &p.value});
  return list;
}

std::vector<std::uint32_t> bits_of(const Tensor& f32) {
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(f32.numel()));
  if (!bits.empty()) std::memcpy(bits.data(), f32.data<float>(), bits.size() * sizeof(float));
  return bits;
}

// The averages' bits are the same in both lists.
void check_same_bits(const std::vector<Pair>& actual, const std::vector<Pair>& expected,
                     const std::string& what) {
  for (std::size_t i = 0; i < actual.size(); ++i)
    BOOST_TEST(bits_of(actual[i].average) == bits_of(expected[i].average),
               what << ": average " << i << " (" << actual[i].average.str() << ")");
}

// The documented arithmetic, one element at a time, written independently of the kernel.
std::vector<float> reference_step(const std::vector<float>& average,
                                  const std::vector<float>& value, float decay) {
  const float one_minus_decay = 1.0f - decay;
  std::vector<float> out(average.size());
  for (std::size_t i = 0; i < average.size(); ++i) {
    const float product = one_minus_decay * value[i];
    out[i] = std::fma(decay, average[i], product);
  }
  return out;
}

std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(ema_update_cpu, TwoThreads)

// Three steps at each decay, each against the scalar reference bit for bit. The float64 bound:
// 1 - decay, the product and the fma each round once (unit roundoff u = 2^-24), so the result
// is within (2u + u^2) |(1 - d) v| + u (|d a| + |(1 - d) v| (1 + 2u)) < 4u (|d a| + |(1 - d) v|)
// of the exact d a + (1 - d) v of the stored inputs.
BOOST_AUTO_TEST_CASE(matches_the_scalar_fma_reference_bit_for_bit_and_float64_within_rounding) {
  Generator generator(21);
  std::vector<Pair> pairs = mixed_pairs(generator);
  const double u = std::ldexp(1.0, -24);
  for (const float decay : {0.9999f, 0.999f, 0.9f, 0.5f, 0.3f, 1e-3f}) {
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> expected;
      std::vector<std::vector<double>> before;
      for (const Pair& p : pairs) {
        expected.push_back(reference_step(p.average.to_floats(), p.value.to_floats(), decay));
        before.push_back(to_doubles(p.average));
      }
      ema_update(list_of(pairs), decay);
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        BOOST_TEST_CONTEXT("decay " << decay << " step " << step << " pair " << i << " ("
                                    << dtype_name(pairs[i].value.dtype()) << ")") {
          const std::vector<float> actual = pairs[i].average.to_floats();
          std::size_t mismatches = 0, outside = 0;
          const std::vector<double> v = to_doubles(pairs[i].value);
          for (std::size_t k = 0; k < actual.size(); ++k) {
            if (float_bits(actual[k]) != float_bits(expected[i][k])) ++mismatches;
            const double d = decay;
            const double exact = d * before[i][k] + (1.0 - d) * v[k];
            const double bound = 4 * u * (std::abs(d * before[i][k]) + std::abs((1.0 - d) * v[k]));
            if (!(std::abs(actual[k] - exact) <= bound)) ++outside;
          }
          BOOST_TEST(mismatches == 0u);
          BOOST_TEST(outside == 0u);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_same_bits_at_one_two_and_three_threads) {
  Generator generator(22);
  const std::vector<Pair> pairs = mixed_pairs(generator);
  const int threads = cpu_threads();
  std::vector<std::vector<Pair>> results;
  for (const int count : {1, 2, 3}) {
    set_cpu_threads(count);
    results.push_back(clone_averages(pairs));
    for (int step = 0; step < 2; ++step)
      ema_update(list_of(results.back()), 0.99f);
  }
  set_cpu_threads(threads);
  check_same_bits(results[1], results[0], "2 threads");
  check_same_bits(results[2], results[0], "3 threads");
  // The averages did move (the comparison is not between untouched copies).
  BOOST_TEST(bits_of(results[0][5].average) != bits_of(pairs[5].average));
}

BOOST_AUTO_TEST_CASE(a_nonzero_skip_flag_changes_nothing_and_zero_updates) {
  Generator generator(23);
  const std::vector<Pair> pairs = mixed_pairs(generator);
  std::vector<Pair> updated = clone_averages(pairs);
  ema_update(list_of(updated), 0.9f);
  for (const float flag : {0.0f, -0.0f}) {
    std::vector<Pair> run = clone_averages(pairs);
    ema_update(list_of(run), 0.9f, Tensor::from_floats({1}, {flag}));
    check_same_bits(run, updated, "skip " + std::to_string(flag));
  }
  for (const float flag : {1.0f, std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(), -2.0f}) {
    std::vector<Pair> run = clone_averages(pairs);
    ema_update(list_of(run), 0.9f, Tensor::from_floats({1}, {flag}));
    check_same_bits(run, pairs, "skip " + std::to_string(flag));
  }
}

// fma(0, a, 1 * v) = v for a finite average: the EMA restarted from the weights.
BOOST_AUTO_TEST_CASE(decay_zero_copies_the_value) {
  Generator generator(24);
  std::vector<Pair> pairs = mixed_pairs(generator);
  ema_update(list_of(pairs), 0.0f);
  for (std::size_t i = 0; i < pairs.size(); ++i)
    BOOST_TEST(pairs[i].average.to_floats() == pairs[i].value.to_floats(),
               "pair " << i << " (" << dtype_name(pairs[i].value.dtype()) << ")");
}

BOOST_AUTO_TEST_CASE(an_empty_list_changes_nothing) {
  ema_update({}, 0.5f);
  ema_update({}, 0.5f, Tensor::from_floats({1}, {0.0f}));
  Tensor average = Tensor::zeros({0}, DType::f32);
  const Tensor value = Tensor::zeros({0}, DType::f16);
  ema_update({{&average, &value}}, 0.5f);
  BOOST_TEST(average.numel() == 0);
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_errors_naming_them_before_anything_changes) {
  const auto fails_with = [](const std::string& part) {
    return [part](const Error& e) { return std::string(e.what()).find(part) != std::string::npos; };
  };
  Tensor average = Tensor::from_floats({3}, {1.0f, 2.0f, 3.0f});
  const Tensor value = Tensor::from_floats({3}, {4.0f, 5.0f, 6.0f}, DType::bf16);
  const std::vector<std::uint32_t> original = bits_of(average);
  for (const float decay : {1.0f, -0.1f, 1.5f, std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity()}) {
    BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}}, decay), Error, fails_with("decay"));
  }
  Tensor half_average = Tensor::from_floats({3}, {1.0f, 2.0f, 3.0f}, DType::f16);
  BOOST_CHECK_EXCEPTION(ema_update({{&half_average, &value}}, 0.5f), Error,
                        fails_with("average must be f32"));
  const Tensor longer = Tensor::zeros({4}, DType::f32);
  const Tensor reshaped = Tensor::zeros({3, 1}, DType::f32);
  const Tensor integer = Tensor::zeros({3}, DType::i32);
  const Tensor undefined;
  // Each bad pair comes second: the first pair must not have been updated when it throws.
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}, {&average, &longer}}, 0.5f), Error,
                        fails_with("value must have shape [3]"));
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}, {&average, &reshaped}}, 0.5f), Error,
                        fails_with("value must have shape [3]"));
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}, {&average, &integer}}, 0.5f), Error,
                        fails_with("value must be f32, f16 or bf16"));
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}, {&average, &undefined}}, 0.5f), Error,
                        fails_with("pair 1"));
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}, {nullptr, &value}}, 0.5f), Error,
                        fails_with("pair 1"));
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}}, 0.5f, Tensor::zeros({2}, DType::f32)),
                        Error, fails_with("skip must have shape [1]"));
  BOOST_CHECK_EXCEPTION(ema_update({{&average, &value}}, 0.5f, Tensor::zeros({1}, DType::i32)),
                        Error, fails_with("skip must be f32"));
  BOOST_TEST(bits_of(average) == original);
}

// With the update count, the decay is TensorFlow's warmed-up one: (1 + n) / (10 + n) while that
// is below the decay (n = 1: 2/11), the decay itself after, read from the count's first element.
BOOST_AUTO_TEST_CASE(an_update_count_warms_the_decay_up) {
  Generator generator(25);
  constexpr float kDecay = 0.99f;
  const std::pair<std::int32_t, float> cases[] = {
      {1, 2.0f / 11.0f}, {5, 6.0f / 15.0f}, {89, 90.0f / 99.0f}, {1000000, kDecay}};
  for (const auto& [updates, decay] : cases) {
    BOOST_TEST_CONTEXT("updates " << updates) {
      std::vector<Pair> pairs = mixed_pairs(generator);
      std::vector<std::vector<float>> expected;
      for (const Pair& p : pairs)
        expected.push_back(reference_step(p.average.to_floats(), p.value.to_floats(), decay));
      const Tensor count =
          Tensor::from_floats({2}, {static_cast<float>(updates), 0.0f}, DType::i32);
      ema_update(list_of(pairs), kDecay, {}, count);
      for (std::size_t i = 0; i < pairs.size(); ++i)
        BOOST_TEST(pairs[i].average.to_floats() == expected[i], "pair " << i);
    }
  }
  std::vector<Pair> pairs = mixed_pairs(generator);
  BOOST_CHECK_THROW(ema_update(list_of(pairs), kDecay, {}, Tensor::from_floats({1}, {1.0f})),
                    Error);
}

BOOST_AUTO_TEST_SUITE_END()
