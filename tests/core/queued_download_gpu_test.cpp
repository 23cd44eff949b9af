// QueuedDownload on CUDA (core/queued_download.h): the copy reads the tensor as the work queued
// before it leaves it, not work queued after; arrived() never waits; read() waits (one host
// wait) only for a copy that has not arrived. A host function holds the device's stream so
// that the copy is still in flight when the host asks, on a GPU as on the emulator.
#include "core/queued_download.h"

#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/round_trips.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#endif

using namespace alloy;

BOOST_AUTO_TEST_SUITE(queued_download_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

void CUDART_CB hold_the_stream(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

std::vector<float> floats_of(const void* bytes, std::size_t count) {
  std::vector<float> values(count);
  std::memcpy(values.data(), bytes, count * sizeof(float));
  return values;
}

}  // namespace

BOOST_AUTO_TEST_CASE(read_waits_only_for_a_copy_in_flight) {
  const Device device = Device::cuda(0);
  const auto hold = [device] {
    ALLOY_CUDA_CHECK(cudaLaunchHostFunc(cuda::stream_of(device), hold_the_stream, nullptr),
                     "holding the stream");
  };
  Tensor source = test::to_cuda(Tensor::from_floats({3}, {1.5f, -2.0f, 8.0f}));
  QueuedDownload download;

  // Read in flight: read() waits for it.
  hold();
  RoundTrips before = round_trips();
  download.queue(source);
  source.fill(0.0f);  // queued after the copy: not in it
  const std::vector<float> held = floats_of(download.read(), 3);
  RoundTrips cost = round_trips() - before;
  BOOST_TEST(held == (std::vector<float>{1.5f, -2.0f, 8.0f}), boost::test_tools::per_element());
  BOOST_TEST(cost.downloads == 1u);
  BOOST_TEST(cost.host_waits == 1u);
  BOOST_TEST(cost.uploads == 0u);

  // Asked first: arrived() says "not yet" without waiting, and once it says "arrived" read()
  // does not wait.
  hold();
  before = round_trips();
  download.queue(source);
  BOOST_TEST(!download.arrived());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool arrived = false;
  while (!arrived && std::chrono::steady_clock::now() < deadline)
    arrived = download.arrived();
  BOOST_REQUIRE(arrived);
  const std::vector<float> zeros = floats_of(download.read(), 3);
  cost = round_trips() - before;
  BOOST_TEST(zeros == (std::vector<float>{0.0f, 0.0f, 0.0f}), boost::test_tools::per_element());
  BOOST_TEST(cost.downloads == 1u);
  BOOST_TEST(cost.host_waits == 0u);

  // A host tensor after a device one: copied at once.
  download.queue(Tensor::from_floats({1}, {3.0f}));
  BOOST_TEST(download.arrived());
  BOOST_TEST(floats_of(download.read(), 1) == std::vector<float>{3.0f},
             boost::test_tools::per_element());
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
