// The CUDA backend's host-side behaviour, testable without a GPU: failing CUDA, cuBLAS, cuDNN
// and NCCL statuses become alloy::Error messages naming the call, the library's status string
// and the object; without a usable device, device tensors fail with the reason; the caching
// allocator's size classes.
#include <boost/test/unit_test.hpp>
#include <string>

#include "core/backend.h"
#include "core/tensor.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#endif

using namespace alloy;

namespace {

// The message of the alloy::Error that `body` throws (fails the test when none is thrown).
template <class Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  BOOST_FAIL("no alloy::Error was thrown");
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  const bool found = text.find(part) != std::string::npos;
  if (!found) BOOST_TEST_MESSAGE("'" << part << "' not in: " << text);
  return found;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_check)

BOOST_AUTO_TEST_CASE(without_a_usable_device_cuda_tensors_fail_with_the_reason) {
  std::string reason;
  if (cuda_available(&reason)) {
    BOOST_TEST_MESSAGE("a CUDA device is usable here; the no-device path is not exercised");
    return;
  }
  BOOST_CHECK(!reason.empty());
  const std::string message = error_of([] { Tensor::empty({4}, DType::f32, Device::cuda(0)); });
  BOOST_CHECK(contains(message, "cuda:0"));
#ifdef ALLOY_HAVE_CUDA
  BOOST_CHECK(contains(message, reason));  // the CPU-only stub words its own message
#endif
}

#ifdef ALLOY_HAVE_CUDA

cudaError_t failing_malloc() {
  return cudaErrorMemoryAllocation;
}
cublasStatus_t failing_gemm() {
  return CUBLAS_STATUS_NOT_INITIALIZED;
}
cudnnStatus_t failing_convolution() {
  return CUDNN_STATUS_BAD_PARAM;
}
ncclResult_t failing_all_reduce() {
  return ncclInvalidArgument;
}

BOOST_AUTO_TEST_CASE(failures_name_the_call_the_status_and_the_object) {
  std::string message =
      error_of([] { ALLOY_CUDA_CHECK(failing_malloc(), "allocating ", 4096, " bytes"); });
  BOOST_CHECK(contains(message, "failing_malloc() failed"));
  BOOST_CHECK(contains(message, cudaGetErrorString(cudaErrorMemoryAllocation)));
  BOOST_CHECK(contains(message, "cudaErrorMemoryAllocation"));
  BOOST_CHECK(contains(message, "[allocating 4096 bytes]"));

  message = error_of([] { ALLOY_CUDA_CHECK(failing_gemm(), "gemm of ", "w"); });
  BOOST_CHECK(contains(message, "failing_gemm() failed"));
  BOOST_CHECK(contains(message, cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)));
  BOOST_CHECK(contains(message, "CUBLAS_STATUS_NOT_INITIALIZED"));
  BOOST_CHECK(contains(message, "[gemm of w]"));

  message = error_of([] { ALLOY_CUDA_CHECK(failing_convolution(), "conv2d_forward"); });
  BOOST_CHECK(contains(message, cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM)));
  BOOST_CHECK(contains(message, "[conv2d_forward]"));

  message = error_of([] { ALLOY_CUDA_CHECK(failing_all_reduce(), "bucket ", 3); });
  BOOST_CHECK(contains(message, ncclGetErrorString(ncclInvalidArgument)));
  BOOST_CHECK(contains(message, "[bucket 3]"));
}

BOOST_AUTO_TEST_CASE(successes_pass_through_without_formatting) {
  int formatted = 0;
  const auto context = [&] {
    ++formatted;
    return "never";
  };
  ALLOY_CUDA_CHECK(cudaSuccess, context());
  ALLOY_CUDA_CHECK(CUBLAS_STATUS_SUCCESS, context());
  ALLOY_CUDA_CHECK(CUDNN_STATUS_SUCCESS, context());
  ALLOY_CUDA_CHECK(ncclSuccess, context());
  BOOST_CHECK_EQUAL(formatted, 0);
}

BOOST_AUTO_TEST_CASE(allocator_size_classes) {
  BOOST_CHECK_EQUAL(cuda::cache_block_size(0), 512u);
  BOOST_CHECK_EQUAL(cuda::cache_block_size(1), 512u);
  BOOST_CHECK_EQUAL(cuda::cache_block_size(512), 512u);
  BOOST_CHECK_EQUAL(cuda::cache_block_size(513), 1024u);
  BOOST_CHECK_EQUAL(cuda::cache_block_size(1u << 20), 1u << 20);
  BOOST_CHECK_EQUAL(cuda::cache_block_size((1u << 20) + 1), 2u << 20);
  BOOST_CHECK_EQUAL(cuda::cache_block_size((2u << 20) + 1), 4u << 20);
}

#endif

BOOST_AUTO_TEST_SUITE_END()
