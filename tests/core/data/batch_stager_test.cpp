// BatchStager on the CPU: the batches come out in order, as the host tensors themselves (the
// device is the host), each counted as the two uploads a GPU makes; at most two wait.
#include "core/data/batch_stager.h"

#include <boost/test/unit_test.hpp>

#include "core/round_trips.h"

using namespace alloy;

namespace {

data::Batch host_batch(std::int64_t size, std::int64_t index) {
  data::Batch batch;
  batch.images = Tensor::empty({size, 1, 4, 4}, DType::u8, Device::cpu(), MemoryCategory::data);
  batch.images.fill(static_cast<float>(index));
  batch.labels = Tensor::empty({size}, DType::i32, Device::cpu(), MemoryCategory::data);
  batch.labels.fill(static_cast<float>(index));
  batch.index = index;
  return batch;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(batch_stager)

BOOST_AUTO_TEST_CASE(batches_come_out_in_order_counted_as_uploads) {
  data::BatchStager stager(Device::cpu());
  const RoundTrips before = round_trips();
  const data::Batch first = host_batch(3, 0);
  const data::Batch second = host_batch(2, 1);
  stager.prefetch(first);
  stager.prefetch(second);
  BOOST_TEST(stager.pending() == 2u);
  const RoundTrips after = round_trips() - before;
  BOOST_TEST(after.uploads == 4u);
  BOOST_TEST(after.host_waits == 0u);
  BOOST_TEST(after.backpressure_waits == 0u);
  BOOST_TEST(after.downloads == 0u);
  BOOST_TEST(after.device_allocations == 0u);

  const data::Batch a = stager.take();
  BOOST_TEST(a.images.raw() == first.images.raw());  // the host batch itself
  BOOST_TEST(a.labels.raw() == first.labels.raw());
  BOOST_TEST(a.index == 0);
  const data::Batch b = stager.take();
  BOOST_TEST(b.index == 1);
  BOOST_TEST(b.labels.numel() == 2);
  BOOST_TEST(stager.pending() == 0u);
  BOOST_TEST(stager.busy_waits() == 0u);
}

BOOST_AUTO_TEST_CASE(misuse_is_an_error) {
  data::BatchStager stager(Device::cpu());
  BOOST_CHECK_THROW(stager.take(), Error);
  stager.prefetch(host_batch(1, 0));
  stager.prefetch(host_batch(1, 1));
  BOOST_CHECK_THROW(stager.prefetch(host_batch(1, 2)), Error);  // two wait already
  stager.clear();
  BOOST_TEST(stager.pending() == 0u);
  BOOST_CHECK_THROW(stager.prefetch(data::Batch{}), Error);
}

BOOST_AUTO_TEST_CASE(take_into_copies_to_fixed_tensors) {
  data::BatchStager stager(Device::cpu());
  data::Batch fixed = host_batch(3, 9);
  void* const images = fixed.images.raw();
  stager.prefetch(host_batch(3, 4));
  stager.take_into(fixed);
  BOOST_TEST(fixed.images.raw() == images);
  BOOST_TEST(fixed.index == 4);
  for (const float v : fixed.images.to_floats())
    BOOST_TEST(v == 4.0f);
  for (const float v : fixed.labels.to_floats())
    BOOST_TEST(v == 4.0f);
}

BOOST_AUTO_TEST_SUITE_END()
