#include "core/cuda/check.h"

namespace alloy::cuda {

std::string status_text(cudaError_t status) {
  return detail::concat(cudaGetErrorString(status), " (", cudaGetErrorName(status), ", ",
                        static_cast<int>(status), ")");
}

std::string status_text(cublasStatus_t status) {
  return detail::concat(cublasGetStatusString(status), " (", cublasGetStatusName(status), ", ",
                        static_cast<int>(status), ")");
}

std::string status_text(cudnnStatus_t status) {
  return detail::concat(cudnnGetErrorString(status), " (cudnnStatus ", static_cast<int>(status),
                        ")");
}

std::string status_text(ncclResult_t status) {
  return detail::concat(ncclGetErrorString(status), " (ncclResult ", static_cast<int>(status), ")");
}

std::string call_failure(const char* call, const std::string& status, const std::string& what) {
  if (what.empty()) return detail::concat(call, " failed: ", status);
  return detail::concat(call, " failed: ", status, " [", what, "]");
}

void fail_call(const char* call, const std::string& status, const std::string& what) {
  throw Error(call_failure(call, status, what));
}

}  // namespace alloy::cuda
