// Status checks for the CUDA runtime, cuBLAS/cuBLASLt, cuDNN and NCCL. A failing call throws
// alloy::Error whose message names the call as written, the library's status string and code,
// and what it was working on:
//   cudaMalloc(&pointer, rounded) failed: out of memory (cudaErrorMemoryAllocation, 2)
//   [allocating 8388608 bytes for activations on cuda:0]
// The context parts are only formatted on failure, so checks cost nothing on the hot path.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <string>

#include "core/error.h"

namespace alloy::cuda {

inline bool status_ok(cudaError_t status) {
  return status == cudaSuccess;
}
inline bool status_ok(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS;
}
inline bool status_ok(cudnnStatus_t status) {
  return status == CUDNN_STATUS_SUCCESS;
}
inline bool status_ok(ncclResult_t status) {
  return status == ncclSuccess;
}

// "<library's description> (<name or code>)".
std::string status_text(cudaError_t status);
std::string status_text(cublasStatus_t status);
std::string status_text(cudnnStatus_t status);
std::string status_text(ncclResult_t status);

// "<call> failed: <status> [<what>]", the message of every failed call.
std::string call_failure(const char* call, const std::string& status, const std::string& what);
[[noreturn]] void fail_call(const char* call, const std::string& status, const std::string& what);

}  // namespace alloy::cuda

// ALLOY_CUDA_CHECK(cudaMemcpyAsync(...), "copying ", bytes, " bytes to ", device.str());
// The context takes at least one part. Works for cudaError_t, cublasStatus_t, cudnnStatus_t and
// ncclResult_t.
#define ALLOY_CUDA_CHECK(call, ...)                                              \
  do {                                                                           \
    const auto alloy_status_ = (call);                                           \
    if (!::alloy::cuda::status_ok(alloy_status_)) {                              \
      ::alloy::cuda::fail_call(#call, ::alloy::cuda::status_text(alloy_status_), \
                               ::alloy::detail::concat(__VA_ARGS__));            \
    }                                                                            \
  } while (0)

// After a kernel launch: launch errors (bad configuration, no kernel image for this device)
// surface here, naming the kernel; errors of the running kernel surface at the next sync.
#define ALLOY_CUDA_CHECK_LAUNCH(...) ALLOY_CUDA_CHECK(cudaGetLastError(), "launching ", __VA_ARGS__)
