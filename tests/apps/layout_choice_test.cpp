// --layout's choice (apps/train/layout_choice.h): auto takes NHWC only on CUDA, with half-precision
// convolutions, in a model with a layout region; nhwc without a region and unknown values are
// usage errors naming the problem.
#include "apps/train/layout_choice.h"

#include <boost/test/unit_test.hpp>
#include <functional>
#include <string>

#include "amp/opt_level.h"
#include "core/models/zoo.h"
#include "tests/support/usage_error.h"

using namespace alloy;
using alloy::test::usage_error_mentions;
using namespace alloy::app;

namespace {

amp::AmpProperties level(const char* name) {
  return amp::resolve_properties(amp::parse_opt_level(name), {});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layout_choice)

BOOST_AUTO_TEST_CASE(auto_takes_nhwc_for_half_convolutions_on_cuda_in_a_layout_region) {
  Generator generator(1);
  const auto resnet = models::make_resnet(18, generator, 10, {});
  const auto lenet = models::make_lenet(generator, 10);
  for (const char* half : {"O1", "O2", "O3"}) {
    BOOST_TEST_CONTEXT(half) {
      BOOST_TEST((choose_layout("auto", "resnet18", *resnet, true, level(half)) == Layout::nhwc));
      BOOST_TEST((choose_layout("auto", "resnet18", *resnet, false, level(half)) == Layout::nchw));
      BOOST_TEST((choose_layout("auto", "lenet", *lenet, true, level(half)) == Layout::nchw));
      BOOST_TEST((choose_layout("nchw", "resnet18", *resnet, true, level(half)) == Layout::nchw));
    }
  }
  BOOST_TEST((choose_layout("auto", "resnet18", *resnet, true, level("O0")) == Layout::nchw));
  BOOST_TEST((choose_layout("nhwc", "resnet18", *resnet, false, level("O0")) == Layout::nhwc));
}

BOOST_AUTO_TEST_CASE(nhwc_without_a_layout_region_and_unknown_values_are_usage_errors) {
  Generator generator(1);
  const auto lenet = models::make_lenet(generator, 10);
  BOOST_TEST(
      usage_error_mentions([&] { choose_layout("nhwc", "lenet", *lenet, true, level("O2")); },
                           "model 'lenet' has no layout region"));
  BOOST_TEST(usage_error_mentions([&] { check_layout_choice("NHWC"); },
                                  "layout 'NHWC' is not one of auto, nchw or nhwc"));
}

BOOST_AUTO_TEST_SUITE_END()
