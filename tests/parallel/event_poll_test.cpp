// cuda::event_done's handling of cudaEventQuery's statuses (core/cuda/handles.h), testable
// without a GPU: "not ready" answers false and leaves no last error behind for the next
// ALLOY_CUDA_CHECK_LAUNCH; success answers true; any other status throws naming the caller.
// The real event, pending then done, is in event_poll_gpu_test.cpp. Skipped (exit 77) in a
// build without the CUDA backend, which has no such code.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <iostream>

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/handles.h"
#endif

namespace {

struct RequireCudaBuild {
  RequireCudaBuild() {
#ifndef ALLOY_HAVE_CUDA
    std::cout << "skipped: built without the CUDA backend" << std::endl;
    std::exit(77);
#endif
  }
};

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(RequireCudaBuild);

BOOST_AUTO_TEST_SUITE(event_poll)

#ifdef ALLOY_HAVE_CUDA

BOOST_AUTO_TEST_CASE(not_ready_is_false_and_leaves_no_last_error) {
  // A failed runtime call (a bad device number) leaves a last error: it stands in for the one
  // cudaEventQuery leaves when the event is pending.
  static_cast<void>(cudaSetDevice(-1));
  BOOST_TEST_REQUIRE(cudaPeekAtLastError() != cudaSuccess);
  BOOST_TEST(!alloy::cuda::event_status_done(cudaErrorNotReady, "polling a test event"));
  const cudaError_t after = cudaPeekAtLastError();
  if (after == cudaErrorInsufficientDriver || after == cudaErrorNoDevice) {
    // Without a driver or device the runtime cannot start, and every call, cudaPeekAtLastError
    // included, reports that anew: there is no clearable error to observe.
    BOOST_TEST_MESSAGE("the runtime cannot start here ("
                       << cudaGetErrorName(after)
                       << "); the clearing is observed only where it can (event_poll_gpu_test)");
  } else {
    BOOST_TEST(after == cudaSuccess, cudaGetErrorName(after));
    BOOST_CHECK_NO_THROW(ALLOY_CUDA_CHECK_LAUNCH("the next kernel"));
  }
}

BOOST_AUTO_TEST_CASE(success_is_true) {
  BOOST_TEST(alloy::cuda::event_status_done(cudaSuccess, "polling a test event"));
}

BOOST_AUTO_TEST_CASE(other_statuses_throw_naming_the_caller) {
  BOOST_CHECK_EXCEPTION(
      alloy::cuda::event_status_done(cudaErrorLaunchFailure, "polling allreduce_sum of f32[4]"),
      alloy::Error, [](const alloy::Error& error) {
        const std::string text = error.what();
        return text.find("cudaEventQuery") != std::string::npos &&
               text.find("cudaErrorLaunchFailure") != std::string::npos &&
               text.find("polling allreduce_sum of f32[4]") != std::string::npos;
      });
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
