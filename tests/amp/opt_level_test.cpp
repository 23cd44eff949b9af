#include "amp/opt_level.h"

#include <boost/test/unit_test.hpp>
#include <functional>

#include "core/error.h"
#include "tests/support/usage_error.h"

using namespace alloy;
using alloy::test::usage_error_mentions;
using namespace alloy::amp;

namespace {
AmpProperties level(const char* name, const AmpOverrides& overrides = {}) {
  return resolve_properties(parse_opt_level(name), overrides);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(opt_level)

BOOST_AUTO_TEST_CASE(apex_defaults_per_level) {
  const AmpProperties o0 = level("O0");
  BOOST_TEST((o0.model_dtype == DType::f32));
  BOOST_TEST(!o0.cast_policy);
  BOOST_TEST(!o0.master_weights);
  BOOST_TEST(!o0.loss_scale.dynamic);
  BOOST_TEST(o0.initial_scale() == 1.0f);

  const AmpProperties o1 = level("O1");
  BOOST_TEST((o1.model_dtype == DType::f32));
  BOOST_TEST(o1.cast_policy);
  BOOST_TEST(!o1.master_weights);
  BOOST_TEST(o1.loss_scale.dynamic);
  BOOST_TEST(o1.initial_scale() == 65536.0f);

  const AmpProperties o2 = level("O2");
  BOOST_TEST((o2.model_dtype == DType::f16));
  BOOST_TEST(!o2.cast_policy);
  BOOST_TEST(o2.keep_batchnorm_fp32);
  BOOST_TEST(o2.master_weights);
  BOOST_TEST(o2.loss_scale.dynamic);
  BOOST_TEST(o2.loss_scale.window == 2000);
  BOOST_TEST(o2.loss_scale.min_scale == 1.0f);
  BOOST_TEST(o2.loss_scale.max_scale == 16777216.0f);

  const AmpProperties o3 = level("O3");
  BOOST_TEST((o3.model_dtype == DType::f16));
  BOOST_TEST(!o3.keep_batchnorm_fp32);
  BOOST_TEST(!o3.master_weights);
  BOOST_TEST(!o3.loss_scale.dynamic);
  BOOST_TEST(o3.initial_scale() == 1.0f);
}

BOOST_AUTO_TEST_CASE(bf16_turns_scaling_off_unless_asked) {
  AmpOverrides bf16;
  bf16.half_dtype = DType::bf16;
  const AmpProperties o2 = level("O2", bf16);
  BOOST_TEST((o2.model_dtype == DType::bf16));
  BOOST_TEST(!o2.loss_scale.dynamic);
  bf16.loss_scale = "dynamic";
  BOOST_TEST(level("O2", bf16).loss_scale.dynamic);
}

BOOST_AUTO_TEST_CASE(each_override_applies) {
  AmpOverrides overrides;
  overrides.keep_batchnorm_fp32 = false;
  overrides.master_weights = false;
  overrides.init_scale = 1024.0f;
  overrides.window = 7;
  overrides.min_scale = 2.0f;
  overrides.max_scale = 4096.0f;
  const AmpProperties p = level("O2", overrides);
  BOOST_TEST(!p.keep_batchnorm_fp32);
  BOOST_TEST(!p.master_weights);
  BOOST_TEST(p.loss_scale.init_scale == 1024.0f);
  BOOST_TEST(p.loss_scale.window == 7);
  BOOST_TEST(p.loss_scale.min_scale == 2.0f);
  BOOST_TEST(p.loss_scale.max_scale == 4096.0f);

  AmpOverrides static_scale;
  static_scale.loss_scale = "128";
  const AmpProperties s = level("O2", static_scale);
  BOOST_TEST(!s.loss_scale.dynamic);
  BOOST_TEST(s.initial_scale() == 128.0f);

  AmpOverrides o3_masters;
  o3_masters.master_weights = true;
  o3_masters.keep_batchnorm_fp32 = true;
  const AmpProperties o3 = level("O3", o3_masters);
  BOOST_TEST(o3.master_weights);
  BOOST_TEST(o3.keep_batchnorm_fp32);
}

BOOST_AUTO_TEST_CASE(nonsense_combinations_are_usage_errors) {
  AmpOverrides keep_bn;
  keep_bn.keep_batchnorm_fp32 = true;
  BOOST_TEST(usage_error_mentions([&] { level("O1", keep_bn); }, "O1"));
  BOOST_TEST(usage_error_mentions([&] { level("O0", keep_bn); }, "half model"));

  AmpOverrides masters;
  masters.master_weights = true;
  BOOST_TEST(usage_error_mentions([&] { level("O0", masters); }, "already are the masters"));
  BOOST_TEST(usage_error_mentions([&] { level("O1", masters); }, "already are the masters"));

  AmpOverrides tune_static;
  tune_static.init_scale = 8.0f;
  BOOST_TEST(usage_error_mentions([&] { level("O3", tune_static); }, "loss_scale dynamic"));

  AmpOverrides bad_scale;
  bad_scale.loss_scale = "lots";
  BOOST_TEST(usage_error_mentions([&] { level("O2", bad_scale); }, "'lots'"));
  bad_scale.loss_scale = "-4";
  BOOST_TEST(usage_error_mentions([&] { level("O2", bad_scale); }, "positive"));

  AmpOverrides inverted;
  inverted.min_scale = 1024.0f;
  inverted.max_scale = 2.0f;
  BOOST_TEST(usage_error_mentions([&] { level("O2", inverted); }, "min_loss_scale"));

  AmpOverrides outside;
  outside.init_scale = 1e9f;  // above the default maximum 2^24
  BOOST_TEST(usage_error_mentions([&] { level("O2", outside); }, "init_loss_scale"));

  AmpOverrides window;
  window.window = 0;
  BOOST_TEST(usage_error_mentions([&] { level("O2", window); }, "scale_window"));

  BOOST_TEST(usage_error_mentions([] { parse_opt_level("02"); }, "letter O"));
}

BOOST_AUTO_TEST_SUITE_END()
