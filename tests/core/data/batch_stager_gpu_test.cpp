// BatchStager on CUDA: batches arrive intact through the pinned double buffers, each prefetch
// is two uploads and no stream synchronise, and the device buffers are reused (no
// allocation) while the batch shape stays.
#include <boost/test/unit_test.hpp>

#include "core/cuda/allocator.h"
#include "core/data/batch_stager.h"
#include "core/round_trips.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(batch_stager_gpu)

BOOST_AUTO_TEST_CASE(batches_arrive_intact_without_a_stream_synchronise) {
  Generator generator(3);
  data::BatchStager stager(Device::cuda(0));
  std::vector<data::Batch> host;
  for (int i = 0; i < 6; ++i) {
    data::Batch batch;
    const Tensor values = random_tensor({5, 1, 7, 7}, DType::f32, generator, 0.0f, 255.0f);
    std::vector<float> pixels = values.to_floats();
    for (float& p : pixels)
      p = static_cast<float>(static_cast<int>(p));
    batch.images = Tensor::empty({5, 1, 7, 7}, DType::u8, Device::cpu(), MemoryCategory::data);
    batch.images.copy_from_floats(pixels);
    batch.labels = random_labels(5, 10, generator);
    batch.index = i;
    host.push_back(batch);
  }
  stager.prefetch(host[0]);
  void* slot_images[2] = {nullptr, nullptr};
  std::int64_t mallocs = 0;
  for (int i = 0; i < 6; ++i) {
    const RoundTrips before = round_trips();
    const std::uint64_t busy = stager.busy_waits();
    const data::Batch batch = stager.take();
    if (i + 1 < 6) stager.prefetch(host[static_cast<std::size_t>(i + 1)]);
    const RoundTrips during = round_trips() - before;
    BOOST_TEST(during.uploads == (i + 1 < 6 ? 2u : 0u));
    BOOST_TEST(during.downloads == 0u);
    BOOST_TEST(during.host_waits == stager.busy_waits() - busy);  // busy buffers only, if any
    if (i < 2) slot_images[i] = batch.images.raw();
    if (i == 2) mallocs = cuda::cache_statistics(0).malloc_calls;
    if (i >= 2) {
      BOOST_TEST(batch.images.raw() == slot_images[i % 2]);  // two buffers, alternating
      BOOST_TEST(cuda::cache_statistics(0).malloc_calls == mallocs);
    }
    check_gpu_equal(batch.images, host[static_cast<std::size_t>(i)].images, "images");
    check_gpu_equal(batch.labels, host[static_cast<std::size_t>(i)].labels, "labels");
  }
}

BOOST_AUTO_TEST_CASE(take_into_fills_fixed_device_tensors) {
  Generator generator(4);
  data::BatchStager stager(Device::cuda(0));
  data::Batch host;
  host.images = Tensor::empty({2, 1, 3, 3}, DType::u8, Device::cpu(), MemoryCategory::data);
  host.images.fill(17.0f);
  host.labels = random_labels(2, 10, generator);
  data::Batch fixed;
  fixed.images = Tensor::empty({2, 1, 3, 3}, DType::u8, Device::cuda(0), MemoryCategory::data);
  fixed.labels = Tensor::empty({2}, DType::i32, Device::cuda(0), MemoryCategory::data);
  void* const address = fixed.images.raw();
  stager.prefetch(host);
  stager.take_into(fixed);
  BOOST_TEST(fixed.images.raw() == address);
  check_gpu_equal(fixed.images, host.images, "images");
  check_gpu_equal(fixed.labels, host.labels, "labels");
}

BOOST_AUTO_TEST_SUITE_END()
