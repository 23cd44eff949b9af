// cuda::event_done on a real event (core/cuda/handles.h): pending while a host function holds
// the stream, with no "not ready" left as the thread's last error, then done. Skipped (exit 77)
// without a usable CUDA device.
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <thread>

#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/handles.h"
#endif

BOOST_AUTO_TEST_SUITE(event_poll_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {
void CUDART_CB hold_the_stream(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_pending_event_leaves_no_last_error) {
  using namespace alloy::cuda;
  Stream stream(0);
  Event event(0);
  ALLOY_CUDA_CHECK(cudaLaunchHostFunc(stream.get(), hold_the_stream, nullptr), "test");
  event.record(stream.get());
  BOOST_TEST(!event.done("polling the test event"));
  BOOST_TEST(cudaPeekAtLastError() == cudaSuccess);
  BOOST_CHECK_NO_THROW(ALLOY_CUDA_CHECK_LAUNCH("the next kernel"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline)
    done = event.done("polling the test event");
  BOOST_TEST(done);
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
