// Stochastic rounding in the CPU optimizer updates (core/ops/optimizer_update.h, the hypers'
// `rounding`): an update of a quarter ulp, which rounding to nearest loses entirely, moves a
// half weight by a quarter ulp on average (over 2^17 elements, within 5 standard errors), for
// SGD and AdamW, fp16 and bf16; every weight lands on one of the two neighbours of its fp32
// value; f32 parameters and O2's model copies are untouched by the setting; the bits depend on
// the step count, and a rerun gives the same bits.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/optimizer_update.h"

using namespace alloy;

namespace {

constexpr std::int64_t kCount = std::int64_t{1} << 17;

// One SGD step (no momentum) with lr 1 on a parameter of ones in `dtype`, gradient `g`.
Tensor sgd_once(DType dtype, float g, const StochasticRounding& rounding, std::int32_t done = 0) {
  Tensor value = Tensor::from_floats({kCount}, std::vector<float>(kCount, 1.0f), dtype);
  const Tensor grad = Tensor::from_floats({kCount}, std::vector<float>(kCount, g));
  const Tensor lr = Tensor::from_floats({1}, {1.0f});
  Tensor step = Tensor::zeros({2}, DType::i32);
  step.data<std::int32_t>()[0] = done;
  SgdHyper hyper;
  hyper.rounding = rounding;
  sgd_update({{&value, &grad, nullptr, nullptr, 2}}, hyper, lr, step);
  return value;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer_update_rounding)

BOOST_AUTO_TEST_CASE(a_quarter_ulp_update_moves_half_weights_by_a_quarter_ulp_on_average) {
  const StochasticRounding on{true, 1234}, off{};
  for (const DType dtype : {DType::f16, DType::bf16}) {
    // The spacing below 1.0: 2^-11 (fp16), 2^-8 (bf16); a quarter of it.
    const float below = dtype == DType::f16 ? 0x1p-11f : 0x1p-8f;
    const float g = below / 4;
    const std::vector<float> nearest = sgd_once(dtype, g, off).to_floats();
    const std::vector<float> rounded = sgd_once(dtype, g, on).to_floats();
    double sum = 0.0;
    bool neighbours = true;
    for (std::int64_t i = 0; i < kCount; ++i) {
      BOOST_TEST_REQUIRE(nearest[i] == 1.0f);  // lost to rounding to nearest
      neighbours = neighbours && (rounded[i] == 1.0f || rounded[i] == 1.0f - below);
      sum += rounded[i];
    }
    BOOST_TEST(neighbours, dtype_name(dtype));
    const double mean = sum / kCount, p = 0.25;
    const double standard_error = below * std::sqrt(p * (1 - p) / kCount);
    BOOST_TEST(std::fabs(mean - (1.0 - g)) < 5 * standard_error,
               dtype_name(dtype) << ": mean " << mean << " for " << 1.0 - g);
  }
}

BOOST_AUTO_TEST_CASE(adamw_rounds_half_weights_stochastically_too) {
  // AdamW's first step moves each weight by lr (m / sqrt(v) = sign(g) after bias correction):
  // lr = a quarter of fp16's spacing below 1.
  Tensor value = Tensor::from_floats({kCount}, std::vector<float>(kCount, 1.0f), DType::f16);
  const Tensor grad = Tensor::from_floats({kCount}, std::vector<float>(kCount, 1.0f));
  Tensor exp_avg = Tensor::zeros({kCount}, DType::f32), exp_avg_sq = exp_avg.clone();
  const Tensor lr = Tensor::from_floats({1}, {0x1p-13f});
  Tensor step = Tensor::zeros({2}, DType::i32);
  AdamWHyper hyper;
  hyper.weight_decay = 0.0f;
  hyper.eps = 0.0f;
  hyper.rounding = {true, 99};
  adamw_update({{&value, &grad, &exp_avg, &exp_avg_sq, nullptr, 0}}, hyper, lr, step);
  double sum = 0.0;
  for (const float v : value.to_floats())
    sum += v;
  const double standard_error = 0x1p-11 * std::sqrt(0.25 * 0.75 / kCount);
  BOOST_TEST(std::fabs(sum / kCount - (1.0 - 0x1p-13)) < 5 * standard_error, sum / kCount);
}

BOOST_AUTO_TEST_CASE(the_bits_follow_the_step_and_repeat_and_fp32_weights_are_untouched) {
  const StochasticRounding on{true, 1234};
  const float g = 0x1p-13f;
  const auto bits = [](const Tensor& t) {
    const auto* raw = static_cast<const std::uint16_t*>(t.raw());
    return std::vector<std::uint16_t>(raw, raw + t.numel());
  };
  BOOST_TEST(bits(sgd_once(DType::f16, g, on, 5)) == bits(sgd_once(DType::f16, g, on, 5)));
  BOOST_TEST(bits(sgd_once(DType::f16, g, on, 5)) != bits(sgd_once(DType::f16, g, on, 6)));
  BOOST_TEST(bits(sgd_once(DType::f16, g, on, 5)) !=
             bits(sgd_once(DType::f16, g, {true, 1235}, 5)));
  // f32 weights, and an O2 model copy written from them, round as without the setting.
  for (const StochasticRounding& rounding : {on, StochasticRounding{}}) {
    Tensor master = Tensor::from_floats({kCount}, std::vector<float>(kCount, 1.0f));
    Tensor copy = Tensor::zeros({kCount}, DType::f16);
    const Tensor grad = Tensor::from_floats({kCount}, std::vector<float>(kCount, g));
    const Tensor lr = Tensor::from_floats({1}, {1.0f});
    Tensor step = Tensor::zeros({2}, DType::i32);
    SgdHyper hyper;
    hyper.rounding = rounding;
    sgd_update({{&master, &grad, nullptr, &copy, 0}}, hyper, lr, step);
    BOOST_TEST(master.to_floats()[7] == 1.0f - g);
    for (const float v : copy.to_floats())
      BOOST_TEST_REQUIRE(v == 1.0f);  // 1 - 2^-13 rounds to nearest: 1
  }
}

BOOST_AUTO_TEST_SUITE_END()
