#include "core/data/loader.h"

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "core/data/sampler.h"
#include "core/error.h"

using namespace alloy;
using namespace alloy::data;

namespace {

using Indices = std::vector<std::int64_t>;

constexpr int kRows = 2;
constexpr int kCols = 3;

std::uint8_t pixel_of(std::int64_t example, int pixel) {
  return static_cast<std::uint8_t>((example * kRows * kCols + pixel) % 251);
}

// Example i has label i and pixels that tell it apart from its neighbours.
Dataset numbered_dataset(std::int64_t size) {
  Dataset dataset;
  dataset.name = "numbered";
  dataset.images =
      Tensor::empty({size, 1, kRows, kCols}, DType::u8, Device::cpu(), MemoryCategory::data);
  dataset.labels = Tensor::empty({size}, DType::i32, Device::cpu(), MemoryCategory::data);
  for (std::int64_t i = 0; i < size; ++i) {
    dataset.labels.data<std::int32_t>()[i] = static_cast<std::int32_t>(i);
    for (int p = 0; p < kRows * kCols; ++p) {
      dataset.images.data<std::uint8_t>()[i * kRows * kCols + p] = pixel_of(i, p);
    }
  }
  return dataset;
}

// Every batch the loader yields, checked against `order` from `start`.
std::vector<std::int64_t> check_batches(Loader& loader, const Indices& order,
                                        std::int64_t batch_size, std::int64_t start) {
  std::vector<std::int64_t> sizes;
  std::int64_t position = start;
  Batch batch;
  while (loader.next(batch)) {
    const std::int64_t size = batch.labels.numel();
    sizes.push_back(size);
    BOOST_TEST(batch.index == position / batch_size);
    BOOST_TEST(batch.images.shape() == (Shape{size, 1, kRows, kCols}));
    BOOST_TEST(std::string(memory_category_name(batch.images.category())) == "data");
    BOOST_TEST(std::string(memory_category_name(batch.labels.category())) == "data");
    for (std::int64_t k = 0; k < size; ++k) {
      const std::int64_t example = order[static_cast<std::size_t>(position + k)];
      BOOST_TEST(batch.labels.data<std::int32_t>()[k] == example);
      for (int p = 0; p < kRows * kCols; ++p) {
        BOOST_TEST(batch.images.data<std::uint8_t>()[k * kRows * kCols + p] ==
                   pixel_of(example, p));
      }
    }
    position += size;
  }
  BOOST_TEST(position == static_cast<std::int64_t>(order.size()));
  BOOST_TEST(!loader.next(batch));  // stays at the end
  return sizes;
}

std::int64_t data_bytes() {
  return memory_stats(Device::cpu()).snapshot().current_of(MemoryCategory::data);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(loader)

BOOST_AUTO_TEST_CASE(batches_follow_the_order_with_a_partial_last_batch) {
  const Dataset dataset = numbered_dataset(103);
  const Indices order = Sampler(103, 11, true).epoch_indices(0);
  Loader loader(dataset, order, 10);
  BOOST_TEST(loader.batches() == 11);
  const auto sizes = check_batches(loader, order, 10, 0);
  BOOST_TEST(sizes == (std::vector<std::int64_t>{10, 10, 10, 10, 10, 10, 10, 10, 10, 10, 3}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(an_exact_multiple_has_no_partial_batch) {
  const Dataset dataset = numbered_dataset(40);
  const Indices order = Sampler(40, 3, true).epoch_indices(1);
  Loader loader(dataset, order, 8);
  BOOST_TEST(loader.batches() == 5);
  BOOST_TEST(check_batches(loader, order, 8, 0) == (std::vector<std::int64_t>(5, 8)),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_start_offset_resumes_mid_epoch) {
  const Dataset dataset = numbered_dataset(50);
  const Indices order = Sampler(50, 9, true).epoch_indices(0);
  Loader loader(dataset, order, 8, 24);  // three batches were already trained on
  BOOST_TEST(loader.batches() == 4);
  BOOST_TEST(check_batches(loader, order, 8, 24) == (std::vector<std::int64_t>{8, 8, 8, 2}),
             boost::test_tools::per_element());

  Loader at_end(dataset, order, 8, 50);
  BOOST_TEST(at_end.batches() == 0);
  BOOST_TEST(check_batches(at_end, order, 8, 50).empty());
}

BOOST_AUTO_TEST_CASE(orders_may_repeat_and_skip_examples) {
  const Dataset dataset = numbered_dataset(5);
  const Indices order = {4, 4, 0, 2};  // a padded shard of a distributed epoch
  Loader loader(dataset, order, 3);
  BOOST_TEST(check_batches(loader, order, 3, 0) == (std::vector<std::int64_t>{3, 1}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(stopping_early_frees_everything) {
  const Dataset dataset = numbered_dataset(1000);
  const std::int64_t before = data_bytes();
  { Loader untouched(dataset, Sampler(1000, 1, true).epoch_indices(0), 16); }
  {
    Loader loader(dataset, Sampler(1000, 1, true).epoch_indices(0), 16);
    Batch batch;
    BOOST_TEST(loader.next(batch));
    BOOST_TEST(loader.next(batch));
    // Give the worker time to prefetch the third batch, which must be freed unseen.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  BOOST_TEST(data_bytes() == before);
}

BOOST_AUTO_TEST_CASE(the_worker_stays_exactly_one_batch_ahead) {
  const Dataset dataset = numbered_dataset(100);
  const std::int64_t before = data_bytes();
  const std::int64_t batch_bytes = 10 * kRows * kCols + 10 * 4;
  Loader loader(dataset, Sampler(100, 1, false).epoch_indices(0), 10);
  Batch batch;
  BOOST_TEST(loader.next(batch));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // The batch in hand plus the one prepared behind it, and no more.
  BOOST_TEST(data_bytes() - before == 2 * batch_bytes);
}

BOOST_AUTO_TEST_CASE(a_worker_failure_surfaces_from_next) {
  const Dataset dataset = numbered_dataset(10);
  const Indices order = {0, 1, 2, 3, 10, 5};
  Loader loader(dataset, order, 4);
  Batch batch;
  BOOST_TEST(loader.next(batch));  // the first batch is whole
  try {
    loader.next(batch);
    BOOST_ERROR("an index outside the dataset went unnoticed");
  } catch (const Error& error) {
    const std::string message = error.what();
    BOOST_TEST(message.find("example index 10 at position 4") != std::string::npos, message);
    BOOST_TEST(message.find("numbered") != std::string::npos, message);
  }
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_rejected) {
  const Dataset dataset = numbered_dataset(10);
  try {
    Loader loader(dataset, {0, 1}, 0);
    BOOST_ERROR("batch size 0 accepted");
  } catch (const UsageError& error) {
    BOOST_TEST(std::string(error.what()) == "batch size must be at least 1, got 0");
  }
  BOOST_CHECK_THROW(Loader(dataset, {0, 1}, -3), UsageError);
  BOOST_CHECK_THROW(Loader(dataset, {0, 1}, 1, 3), Error);
  BOOST_CHECK_THROW(Loader(dataset, {0, 1}, 1, -1), Error);
  Dataset mismatched = dataset;
  mismatched.labels = Tensor::empty({9}, DType::i32, Device::cpu(), MemoryCategory::data);
  BOOST_CHECK_THROW(Loader(mismatched, {0}, 1), Error);
  BOOST_CHECK_THROW(Loader(Dataset{}, {}, 1), Error);
}

BOOST_AUTO_TEST_SUITE_END()
