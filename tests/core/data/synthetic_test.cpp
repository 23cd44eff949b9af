#include "core/data/synthetic.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"

using namespace alloy;
using namespace alloy::data;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::vector<std::int64_t> class_counts(const Dataset& dataset) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(dataset.classes), 0);
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    ++counts.at(static_cast<std::size_t>(dataset.labels.data<std::int32_t>()[i]));
  }
  return counts;
}

// Accuracy on `test` of the nearest class mean learned from `train`: a stand-in for a model,
// which tells whether the classes are learnable and shared between the two sets.
double nearest_mean_accuracy(const Dataset& train, const Dataset& test) {
  const auto pixels = static_cast<std::size_t>(train.images.numel() / train.size());
  std::vector<std::vector<double>> means(static_cast<std::size_t>(train.classes),
                                         std::vector<double>(pixels, 0.0));
  const auto counts = class_counts(train);
  for (std::int64_t i = 0; i < train.size(); ++i) {
    const auto label = static_cast<std::size_t>(train.labels.data<std::int32_t>()[i]);
    const std::uint8_t* image = train.images.data<std::uint8_t>() + i * pixels;
    for (std::size_t p = 0; p < pixels; ++p) {
      means[label][p] += image[p] / static_cast<double>(counts[label]);
    }
  }
  std::int64_t correct = 0;
  for (std::int64_t i = 0; i < test.size(); ++i) {
    const std::uint8_t* image = test.images.data<std::uint8_t>() + i * pixels;
    std::size_t best = 0;
    double best_distance = 0.0;
    for (std::size_t c = 0; c < means.size(); ++c) {
      double distance = 0.0;
      for (std::size_t p = 0; p < pixels; ++p) {
        distance += (image[p] - means[c][p]) * (image[p] - means[c][p]);
      }
      if (c == 0 || distance < best_distance) {
        best = c;
        best_distance = distance;
      }
    }
    correct += static_cast<std::int64_t>(best) == test.labels.data<std::int32_t>()[i];
  }
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(synthetic)

BOOST_AUTO_TEST_CASE(has_mnist_geometry_and_balanced_labels) {
  const Dataset dataset = make_synthetic_dataset(2000, 3, "synthetic/train");
  BOOST_TEST(dataset.name == "synthetic/train");
  BOOST_TEST(dataset.size() == 2000);
  BOOST_TEST(dataset.classes == 10);
  BOOST_TEST(dataset.images.shape() == (Shape{2000, 1, 28, 28}));
  BOOST_TEST(std::string(dtype_name(dataset.images.dtype())) == "u8");
  BOOST_TEST(std::string(dtype_name(dataset.labels.dtype())) == "i32");
  BOOST_TEST(std::string(memory_category_name(dataset.images.category())) == "data");
  BOOST_TEST(std::string(memory_category_name(dataset.labels.category())) == "data");
  for (const std::int64_t count : class_counts(dataset)) {
    BOOST_TEST(count > 140);  // 200 expected per class
    BOOST_TEST(count < 260);
  }
  // Images use the range: dark background and bright ink.
  std::int64_t dark = 0;
  std::int64_t bright = 0;
  const std::uint8_t* pixels = dataset.images.data<std::uint8_t>();
  for (std::int64_t i = 0; i < dataset.images.numel(); ++i) {
    dark += pixels[i] < 32;
    bright += pixels[i] > 160;
  }
  BOOST_TEST(dark > dataset.images.numel() / 5);
  BOOST_TEST(bright > dataset.images.numel() / 10);
}

BOOST_AUTO_TEST_CASE(is_deterministic_in_seed_and_name) {
  const Dataset a = make_synthetic_dataset(300, 17, "synthetic/train");
  const Dataset b = make_synthetic_dataset(300, 17, "synthetic/train");
  BOOST_TEST(same_bytes(a.images, b.images));
  BOOST_TEST(same_bytes(a.labels, b.labels));
  BOOST_TEST(!same_bytes(a.images, make_synthetic_dataset(300, 18, "synthetic/train").images));
  BOOST_TEST(!same_bytes(a.images, make_synthetic_dataset(300, 17, "synthetic/test").images));
}

BOOST_AUTO_TEST_CASE(is_learnable_and_train_and_test_share_the_classes) {
  const Dataset train = make_synthetic_dataset(2000, 5, "synthetic/train");
  const Dataset test = make_synthetic_dataset(500, 5, "synthetic/test");
  const double accuracy = nearest_mean_accuracy(train, test);
  BOOST_TEST_MESSAGE("nearest class mean accuracy " << accuracy);
  BOOST_TEST(accuracy > 0.9);
  // Another seed draws other templates: what was learned does not transfer.
  const Dataset other = make_synthetic_dataset(500, 6, "synthetic/test");
  BOOST_TEST(nearest_mean_accuracy(train, other) < 0.4);
}

BOOST_AUTO_TEST_CASE(honours_the_geometry_arguments) {
  const Dataset dataset = make_synthetic_dataset(50, 1, "small", 3, 9, 13);
  BOOST_TEST(dataset.images.shape() == (Shape{50, 1, 9, 13}));
  BOOST_TEST(dataset.classes == 3);
  for (std::int64_t i = 0; i < 50; ++i) {
    const std::int32_t label = dataset.labels.data<std::int32_t>()[i];
    BOOST_TEST((label >= 0 && label < 3));
  }
  BOOST_TEST(make_synthetic_dataset(0, 1, "empty").size() == 0);
  BOOST_CHECK_THROW(make_synthetic_dataset(-1, 1, "x"), Error);
  BOOST_CHECK_THROW(make_synthetic_dataset(10, 1, "x", 0), Error);
  BOOST_CHECK_THROW(make_synthetic_dataset(10, 1, "x", 10, 0, 28), Error);
}

BOOST_AUTO_TEST_CASE(rgb_images_are_learnable_and_independent_of_the_thread_count) {
  set_cpu_threads(1);
  const Dataset one = make_synthetic_dataset(300, 5, "synthetic/train", 4, 40, 40, 3);
  set_cpu_threads(2);
  const Dataset two = make_synthetic_dataset(300, 5, "synthetic/train", 4, 40, 40, 3);
  BOOST_TEST(one.images.shape() == (Shape{300, 3, 40, 40}));
  // Each example draws from its own generator: any split over threads gives the same bytes.
  BOOST_TEST(same_bytes(one.images, two.images));
  BOOST_TEST(same_bytes(one.labels, two.labels));
  const Dataset test = make_synthetic_dataset(100, 5, "synthetic/test", 4, 40, 40, 3);
  BOOST_TEST(!same_bytes(test.images,
                         make_synthetic_dataset(100, 5, "synthetic/train", 4, 40, 40, 3).images));
  const double accuracy = nearest_mean_accuracy(one, test);
  BOOST_TEST_MESSAGE("nearest class mean accuracy, RGB " << accuracy);
  BOOST_TEST(accuracy > 0.9);
  for (const auto count : class_counts(one))
    BOOST_TEST(count > 40);
  BOOST_CHECK_THROW(make_synthetic_dataset(10, 1, "x", 10, 28, 28, 2), Error);
}

BOOST_AUTO_TEST_SUITE_END()
