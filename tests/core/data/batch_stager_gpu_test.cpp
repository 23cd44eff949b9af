// BatchStager on CUDA: batches arrive intact through the pinned double buffers, each prefetch
// is two uploads and no stream synchronise, and the device buffers are reused (no
// allocation) while the batch shape stays.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/data/batch_stager.h"
#include "core/round_trips.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#endif

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
    BOOST_TEST(during.backpressure_waits == during.host_waits);
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

#ifdef ALLOY_HAVE_CUDA

namespace {
void CUDART_CB hold_the_stream(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}
}  // namespace

// The device behind the host: the first batch's upload is queued behind compute (here a host
// function holding the device's stream), so the third prefetch, which reuses its pinned buffer,
// waits for it. That wait is back-pressure: counted as a host wait and a back-pressure wait.
BOOST_AUTO_TEST_CASE(a_pinned_buffer_still_uploading_is_a_backpressure_wait) {
  Generator generator(5);
  data::BatchStager stager(Device::cuda(0));
  std::vector<data::Batch> host(3);
  for (data::Batch& batch : host) {
    batch.images = Tensor::empty({2, 1, 3, 3}, DType::u8, Device::cpu(), MemoryCategory::data);
    batch.images.fill(9.0f);
    batch.labels = random_labels(2, 10, generator);
  }
  ALLOY_CUDA_CHECK(cudaLaunchHostFunc(cuda::stream_of(Device::cuda(0)), hold_the_stream, nullptr),
                   "test");
  const RoundTrips before = round_trips();
  stager.prefetch(host[0]);
  stager.take();
  stager.prefetch(host[1]);
  const data::Batch second = stager.take();
  const RoundTrips two = round_trips() - before;
  BOOST_TEST(two.host_waits == 0u);
  stager.prefetch(host[2]);  // the first batch's buffer
  const RoundTrips three = round_trips() - before;
  BOOST_TEST(three.host_waits == 1u);
  BOOST_TEST(three.backpressure_waits == 1u);
  BOOST_TEST(stager.busy_waits() == 1u);
  check_gpu_equal(stager.take().labels, host[2].labels, "labels");
  check_gpu_equal(second.labels, host[1].labels, "labels");
}

#endif

BOOST_AUTO_TEST_SUITE_END()
