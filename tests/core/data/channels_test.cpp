// convert_channels: gray replicated into R, G and B; RGB to luma as PIL's convert("L").
#include <boost/test/unit_test.hpp>

#include "core/data/channels.h"
#include "core/error.h"

using namespace alloy;
using namespace alloy::data;

namespace {

Dataset make(const Shape& shape, const std::vector<float>& pixels) {
  Dataset dataset;
  dataset.name = "test";
  dataset.images = Tensor::from_floats(shape, pixels, DType::u8);
  dataset.labels = Tensor::zeros({shape[0]}, DType::i32);
  return dataset;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(channels)

BOOST_AUTO_TEST_CASE(gray_is_replicated_into_three_channels) {
  const Dataset gray = make({2, 1, 1, 3}, {0, 17, 255, 3, 128, 9});
  const Dataset rgb = convert_channels(gray, 3);
  BOOST_TEST((rgb.images.shape() == Shape{2, 3, 1, 3}));
  const std::vector<float> expected = {0, 17,  255, 0, 17,  255, 0, 17,  255,
                                       3, 128, 9,   3, 128, 9,   3, 128, 9};
  const std::vector<float> got = rgb.images.to_floats();
  BOOST_TEST(got == expected, boost::test_tools::per_element());
  BOOST_TEST(convert_channels(gray, 1).images.raw() == gray.images.raw());  // already so
}

BOOST_AUTO_TEST_CASE(rgb_becomes_pils_luma) {
  // One image of 5 pixels, R plane then G then B. PIL's convert("L") of these pixels:
  // red 76, green 150, blue 29, white 255, (10, 200, 30) 124 (123.81 rounded).
  const Dataset rgb = make({1, 3, 1, 5}, {255, 0, 0, 255, 10,    // R
                                          0, 255, 0, 255, 200,   // G
                                          0, 0, 255, 255, 30});  // B
  const Dataset gray = convert_channels(rgb, 1);
  BOOST_TEST((gray.images.shape() == Shape{1, 1, 1, 5}));
  const std::vector<float> expected = {76, 150, 29, 255, 124};
  const std::vector<float> got = gray.images.to_floats();
  BOOST_TEST(got == expected, boost::test_tools::per_element());
  BOOST_CHECK_THROW(convert_channels(rgb, 2), Error);
}

BOOST_AUTO_TEST_SUITE_END()
