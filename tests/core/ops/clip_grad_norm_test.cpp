// The gradient-norm clip on the CPU: the total L2 norm and the coefficient
// min(max_norm / (norm + 1e-6), 1) of torch.nn.utils.clip_grad_norm_ against a float64
// reference over tensors of mixed sizes (across the kernel's chunk edges) and dtypes; a limit
// above the norm, exact zero gradients, inf and NaN gradients; the same bits at 1, 2 and 3
// threads; the tally's counts; O2's unscale factor; argument checks.
#include "core/ops/clip_grad_norm.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "tests/support/gradcheck.h"

using namespace alloy;
using namespace alloy::test;

namespace {

// Sizes around the CPU kernel's 16384-element chunks and 1024-element blocks, in f32, f16 and
// bf16 in turn.
std::vector<Tensor> mixed_gradients(Generator& generator, float range) {
  const std::int64_t sizes[] = {1, 7, 1023, 16383, 16385, 50001, 300, 2};
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < std::size(sizes); ++i)
    grads.push_back(random_tensor({sizes[i]}, dtypes[i % 3], generator, -range, range));
  return grads;
}

std::vector<const Tensor*> pointers(const std::vector<Tensor>& tensors) {
  std::vector<const Tensor*> out;
  for (const Tensor& t : tensors)
    out.push_back(&t);
  return out;
}

// The norm of the stored values in float64: what PyTorch's norm approximates.
double reference_norm(const std::vector<Tensor>& grads) {
  double sum = 0.0;
  for (const Tensor& g : grads) {
    for (const double value : to_doubles(g))
      sum += value * value;
  }
  return std::sqrt(sum);
}

double reference_coefficient(double norm, double max_norm) {
  return std::min(max_norm / (norm + 1e-6), 1.0);
}

struct Result {
  float norm, coefficient;
};

Result run(const std::vector<Tensor>& grads, float max_norm, Tensor& tally) {
  Tensor norm = Tensor::empty({1}, DType::f32);
  Tensor coefficient = Tensor::empty({1}, DType::f32);
  clip_grad_norm(pointers(grads), max_norm, norm, coefficient, tally);
  return {norm.data<float>()[0], coefficient.data<float>()[0]};
}

Result run(const std::vector<Tensor>& grads, float max_norm) {
  Tensor none;
  return run(grads, max_norm, none);
}

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

std::uint64_t bits_of(double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

struct TwoThreads {
  TwoThreads() { set_cpu_threads(2); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(clip_grad_norm_cpu, TwoThreads)

BOOST_AUTO_TEST_CASE(norm_and_coefficient_match_float64_over_mixed_sizes_and_dtypes) {
  Generator generator(11);
  for (const float range : {1e-3f, 1.0f, 200.0f}) {
    const std::vector<Tensor> grads = mixed_gradients(generator, range);
    const double norm = reference_norm(grads);
    // Limits below the norm clip; the coefficient is then about limit / norm.
    for (const double fraction : {0.5, 0.01}) {
      const auto max_norm = static_cast<float>(norm * fraction);
      const Result result = run(grads, max_norm);
      BOOST_TEST_CONTEXT("range " << range << " limit " << max_norm) {
        BOOST_TEST(result.norm == norm, boost::test_tools::tolerance(1e-6));
        BOOST_TEST(result.coefficient == reference_coefficient(norm, max_norm),
                   boost::test_tools::tolerance(1e-6));
        BOOST_TEST(result.coefficient < 1.0f);
      }
    }
  }
}

// O2's still-scaled half gradients with the inverse of their scale: the very bits of the clip
// over fp32 copies holding fl(g * unscale), what the update then reads.
BOOST_AUTO_TEST_CASE(unscale_gives_the_bits_of_unscaled_fp32_copies) {
  Generator generator(17);
  const std::vector<Tensor> grads = mixed_gradients(generator, 3000.0f);
  const float inverse = 1.0f / 1536.0f;
  std::vector<Tensor> unscaled;
  for (const Tensor& g : grads)
    unscaled.push_back(multiplied(g, inverse));
  const Tensor unscale = Tensor::from_floats({1}, {inverse});
  Tensor norm = Tensor::empty({1}, DType::f32), coefficient = Tensor::empty({1}, DType::f32);
  Tensor no_tally;
  clip_grad_norm(pointers(grads), 0.5f, norm, coefficient, no_tally, unscale);
  const Result expected = run(unscaled, 0.5f);
  BOOST_TEST(bits_of(norm.data<float>()[0]) == bits_of(expected.norm));
  BOOST_TEST(bits_of(coefficient.data<float>()[0]) == bits_of(expected.coefficient));
  BOOST_TEST(expected.norm == reference_norm(grads) * inverse, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(cpu::sum_of_squares({{grads[1].raw(), grads[1].dtype(), grads[1].numel()}}, inverse) ==
             cpu::sum_of_squares({{unscaled[1].raw(), DType::f32, unscaled[1].numel()}}));
}

BOOST_AUTO_TEST_CASE(the_coefficient_is_exactly_one_under_the_limit) {
  Generator generator(12);
  const std::vector<Tensor> grads = mixed_gradients(generator, 1.0f);
  const double norm = reference_norm(grads);
  for (const double factor : {1.01, 2.0, 1e6}) {
    const Result result = run(grads, static_cast<float>(norm * factor));
    BOOST_TEST(result.coefficient == 1.0f, "limit " << factor << " x the norm");
    BOOST_TEST(result.norm == norm, boost::test_tools::tolerance(1e-6));
  }
}

BOOST_AUTO_TEST_CASE(exact_zero_gradients_have_norm_zero) {
  std::vector<Tensor> grads;
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16})
    grads.push_back(Tensor::zeros({40000}, dtype));
  const Result loose = run(grads, 1.0f);
  BOOST_TEST(bits_of(loose.norm) == 0u);  // +0, exactly
  BOOST_TEST(loose.coefficient == 1.0f);
  // Only the 1e-6 guard keeps the division finite: a limit below it still divides by 1e-6.
  const Result tight = run(grads, 1e-7f);
  BOOST_TEST(tight.norm == 0.0f);
  BOOST_TEST(tight.coefficient == 1e-7f / 1e-6f);
  // No gradients at all: the empty sum.
  const Result none = run({}, 0.5f);
  BOOST_TEST(none.norm == 0.0f);
  BOOST_TEST(none.coefficient == 1.0f);
}

BOOST_AUTO_TEST_CASE(inf_gives_coefficient_zero_and_nan_gives_nan_as_pytorch) {
  Generator generator(13);
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      std::vector<Tensor> grads = mixed_gradients(generator, 1.0f);
      std::vector<float> values(3000, 0.5f);
      values[1234] = std::numeric_limits<float>::infinity();
      grads.push_back(Tensor::from_floats({3000}, values, dtype));
      Tensor& poisoned = grads.back();
      poisoned.copy_from(Tensor::from_floats({3000}, values, dtype));
      Tensor tally = make_clip_tally(Device::cpu());
      // PyTorch: total_norm inf, clip_coef = max_norm / inf = 0.
      const Result inf = run(grads, 1.0f, tally);
      BOOST_TEST(std::isinf(inf.norm));
      BOOST_TEST(inf.coefficient == 0.0f);
      values[17] = std::numeric_limits<float>::quiet_NaN();
      poisoned.copy_from(Tensor::from_floats({3000}, values, dtype));
      const Result nan = run(grads, 1.0f, tally);
      BOOST_TEST(std::isnan(nan.norm));
      BOOST_TEST(std::isnan(nan.coefficient));  // the clamp to 1 keeps NaN
      const ClipTally counted = read_clip_tally(tally);
      BOOST_TEST(counted.finite_steps == 0);
      BOOST_TEST(counted.clipped_steps == 0);
      BOOST_TEST(counted.norm_sum == 0.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(the_same_bits_at_every_thread_count) {
  Generator generator(14);
  // Values spread over many magnitudes, so a sum in another order rounds differently.
  std::vector<Tensor> grads = mixed_gradients(generator, 1.0f);
  for (Tensor& g : grads) {
    std::vector<float> values = g.to_floats();
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] *= std::ldexp(1.0f, static_cast<int>(i % 23) - 11);
    g.copy_from(Tensor::from_floats(g.shape(), values, g.dtype()));
  }
  std::vector<NormItem> items;
  for (const Tensor& g : grads)
    items.push_back({g.raw(), g.dtype(), g.numel()});
  const int threads = cpu_threads();
  std::vector<double> sums;
  std::vector<Result> results;
  for (const int count : {1, 2, 3}) {
    set_cpu_threads(count);
    sums.push_back(cpu::sum_of_squares(items));
    results.push_back(run(grads, 0.25f));
  }
  set_cpu_threads(threads);
  for (std::size_t i = 1; i < sums.size(); ++i) {
    BOOST_TEST(bits_of(sums[i]) == bits_of(sums[0]), i + 1 << " threads: sum of squares");
    BOOST_TEST(bits_of(results[i].norm) == bits_of(results[0].norm), i + 1 << " threads: norm");
    BOOST_TEST(bits_of(results[i].coefficient) == bits_of(results[0].coefficient),
               i + 1 << " threads: coefficient");
  }
  double expected = 0.0;
  for (const Tensor& g : grads) {
    for (const double value : to_doubles(g))
      expected += value * value;
  }
  BOOST_TEST(sums[0] == expected, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(the_tally_adds_finite_norms_and_counts_clipped_calls) {
  Generator generator(15);
  const std::vector<Tensor> grads = mixed_gradients(generator, 1.0f);
  const double norm = reference_norm(grads);
  Tensor tally = make_clip_tally(Device::cpu());
  const Result under = run(grads, static_cast<float>(norm * 2), tally);
  const Result over = run(grads, static_cast<float>(norm / 3), tally);
  const Result again = run(grads, static_cast<float>(norm / 5), tally);
  std::vector<Tensor> bad = grads;
  bad.push_back(Tensor::from_floats({2}, {1.0f, std::numeric_limits<float>::infinity()}));
  run(bad, 1.0f, tally);  // not finite: not counted
  const ClipTally counted = read_clip_tally(tally);
  BOOST_TEST(counted.finite_steps == 3);
  BOOST_TEST(counted.clipped_steps == 2);
  // Each call adds its f32 norm in double, in call order.
  const double expected = (static_cast<double>(under.norm) + over.norm) + again.norm;
  BOOST_TEST(bits_of(counted.norm_sum) == bits_of(expected));
  tally.fill(0.0f);  // the trainer's reset at each epoch start
  const ClipTally reset = read_clip_tally(tally);
  BOOST_TEST(reset.finite_steps == 0);
  BOOST_TEST(reset.clipped_steps == 0);
  BOOST_TEST(reset.norm_sum == 0.0);
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_errors_naming_them) {
  const Tensor grad = Tensor::from_floats({2}, {1.0f, 2.0f});
  Tensor norm = Tensor::empty({1}, DType::f32);
  Tensor coefficient = Tensor::empty({1}, DType::f32);
  Tensor tally;
  const auto fails_with = [](const std::string& part) {
    return [part](const Error& e) { return std::string(e.what()).find(part) != std::string::npos; };
  };
  for (const float limit : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()}) {
    BOOST_CHECK_EXCEPTION(clip_grad_norm({&grad}, limit, norm, coefficient, tally), Error,
                          fails_with("max_norm"));
  }
  Tensor wide = Tensor::empty({2}, DType::f32);
  BOOST_CHECK_EXCEPTION(clip_grad_norm({&grad}, 1.0f, wide, coefficient, tally), Error,
                        fails_with("norm"));
  Tensor integer = Tensor::empty({1}, DType::i32);
  BOOST_CHECK_EXCEPTION(clip_grad_norm({&grad}, 1.0f, norm, integer, tally), Error,
                        fails_with("coefficient"));
  const Tensor labels = Tensor::zeros({2}, DType::i32);
  BOOST_CHECK_EXCEPTION(clip_grad_norm({&labels}, 1.0f, norm, coefficient, tally), Error,
                        fails_with("gradient"));
  const Tensor undefined;
  BOOST_CHECK_EXCEPTION(clip_grad_norm({&undefined}, 1.0f, norm, coefficient, tally), Error,
                        fails_with("undefined"));
  Tensor small_tally = Tensor::zeros({2}, DType::i32);
  BOOST_CHECK_EXCEPTION(clip_grad_norm({&grad}, 1.0f, norm, coefficient, small_tally), Error,
                        fails_with("tally"));
  BOOST_CHECK_EXCEPTION(clip_grad_norm({&grad}, 1.0f, norm, coefficient, tally, wide), Error,
                        fails_with("unscale"));
}

BOOST_AUTO_TEST_SUITE_END()
