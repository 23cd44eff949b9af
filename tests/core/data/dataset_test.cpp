#include "core/data/dataset.h"

#include <boost/test/unit_test.hpp>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/data/synthetic.h"
#include "tests/support/process.h"

using namespace alloy;
using namespace alloy::data;

namespace {

// Examples per class; labels out of range are counted in one extra slot at the end.
std::vector<std::int64_t> class_counts(const Dataset& dataset) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(dataset.classes) + 1, 0);
  for (std::int64_t i = 0; i < dataset.size(); ++i) {
    const std::int32_t label = dataset.labels.data<std::int32_t>()[i];
    const bool valid = label >= 0 && label < dataset.classes;
    ++counts[static_cast<std::size_t>(valid ? label : dataset.classes)];
  }
  return counts;
}

void check_real(const Dataset& dataset, const std::string& name, std::int64_t size) {
  BOOST_TEST(dataset.name == name);
  BOOST_TEST(dataset.size() == size);
  BOOST_TEST(dataset.images.shape() == (Shape{size, 1, 28, 28}));
  BOOST_TEST(dataset.classes == 10);
  const auto counts = class_counts(dataset);
  for (std::size_t c = 0; c < 10; ++c)
    BOOST_TEST(counts[c] == size / 10, name << " class " << c);
  BOOST_TEST(counts[10] == 0, name << ": labels outside [0, 10)");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dataset)

BOOST_AUTO_TEST_CASE(loads_the_real_fashion_mnist) {
  const std::string directory = ALLOY_TEST_DATA_DIR;
  BOOST_REQUIRE_MESSAGE(std::filesystem::is_directory(directory),
                        "Fashion-MNIST is missing from "
                            << directory
                            << "; tools/setup.sh installs it "
                               "(apt-get install dataset-fashion-mnist)");
  const DatasetPair pair = load_datasets("fashion-mnist", directory, 0);
  check_real(pair.train, "fashion-mnist/train", 60000);
  check_real(pair.test, "fashion-mnist/test", 10000);
  // The first training image is an ankle boot (class 9), as in the published data set.
  BOOST_TEST(pair.train.labels.data<std::int32_t>()[0] == 9);
}

BOOST_AUTO_TEST_CASE(synthetic_needs_no_files_and_follows_the_seed) {
  const DatasetPair pair = load_datasets("synthetic", "/nonexistent", 4);
  BOOST_TEST(pair.train.name == "synthetic/train");
  BOOST_TEST(pair.test.name == "synthetic/test");
  BOOST_TEST(pair.train.size() == kSyntheticTrainSize);
  BOOST_TEST(pair.test.size() == kSyntheticTestSize);
  BOOST_TEST(pair.train.images.shape() == (Shape{kSyntheticTrainSize, 1, 28, 28}));
  const Dataset expected = make_synthetic_dataset(kSyntheticTestSize, 4, "synthetic/test");
  BOOST_TEST(std::memcmp(pair.test.images.raw(), expected.images.raw(), expected.images.nbytes()) ==
             0);
}

BOOST_AUTO_TEST_CASE(a_missing_directory_names_it_and_the_remedies) {
  test::TempDir dir;
  const std::string missing = dir.file("nowhere");
  try {
    load_datasets("mnist", missing, 0);
    BOOST_ERROR("a missing directory was accepted");
  } catch (const UsageError&) {
    BOOST_ERROR("a missing directory is no usage error");
  } catch (const Error& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find(missing) != std::string::npos, message);
    BOOST_TEST(message.find("apt-get install dataset-fashion-mnist") != std::string::npos, message);
    BOOST_TEST(message.find("--dataset synthetic") != std::string::npos, message);
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_kind_is_a_usage_error_listing_the_choices) {
  try {
    load_datasets("imagenet", ALLOY_TEST_DATA_DIR, 0);
    BOOST_ERROR("an unknown kind was accepted");
  } catch (const UsageError& error) {
    BOOST_TEST(std::string(error.what()) ==
               "unknown dataset 'imagenet' (choices: fashion-mnist, mnist, cifar10, synthetic)");
  }
}

BOOST_AUTO_TEST_SUITE_END()
