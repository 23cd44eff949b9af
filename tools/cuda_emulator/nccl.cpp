// Emulated NCCL for communicators of one rank (the project runs one process per rank; a real
// multi-rank world needs real NCCL): init with a config, finalize/destroy/abort, async error
// queries, the error strings, and all-reduce and broadcast as stream work. With one rank every
// reduction (sum, product, max, min, average) of a buffer is the buffer itself, so the
// collectives copy send to receive after checking both device ranges.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>

#include "tools/cuda_emulator/emulator.h"

struct ncclComm {
  int device = 0;
  bool finalized = false;
};

namespace {

// NCCL keeps one last-error text for the process (ncclGetLastError ignores its argument).
struct LastError {
  std::mutex mutex;
  char text[512] = "";
};

LastError& last_error() {
  static LastError error;
  return error;
}

ncclResult_t fail(ncclResult_t result, const std::string& text) {
  LastError& error = last_error();
  const std::lock_guard<std::mutex> lock(error.mutex);
  std::snprintf(error.text, sizeof error.text, "%s", text.c_str());
  return result;
}

std::size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

// Checks common to the collectives, then queues the one-rank result: receive = send.
ncclResult_t one_rank_collective(const char* name, const void* send, void* receive,
                                 std::size_t count, ncclDataType_t type, ncclComm_t comm,
                                 cudaStream_t stream) {
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(name) + ": comm is NULL");
  if (comm->finalized) {
    return fail(ncclInvalidUsage,
                std::string(name) + ": the communicator was finalized; no collective may follow");
  }
  const std::size_t element = type_size(type);
  if (element == 0) {
    return fail(ncclInvalidArgument, std::string(name) + ": invalid data type " +
                                         std::to_string(static_cast<int>(type)));
  }
  if (count == 0) return ncclSuccess;
  const std::size_t bytes = count * element;
  const cudaError_t queued = alloy::emulator::enqueue(
      stream, {name, [=] {
                 alloy::emulator::require_device_range(send, bytes,
                                                       std::string(name) + " send buffer");
                 alloy::emulator::require_device_range(receive, bytes,
                                                       std::string(name) + " receive buffer");
                 if (send != receive) std::memmove(receive, send, bytes);
               }});
  if (queued != cudaSuccess) {
    return fail(ncclUnhandledCudaError, std::string(name) + ": queuing on the stream failed: " +
                                            cudaGetErrorString(queued));
  }
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  std::random_device entropy;
  for (char& byte : id->internal)
    byte = static_cast<char>(entropy());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank,
                                    ncclConfig_t* config) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRankConfig: comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return fail(ncclInvalidArgument, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                         " of " + std::to_string(nranks) + " ranks is invalid");
  }
  // NCCL refuses a config not set up by NCCL_CONFIG_INITIALIZER.
  if (config != nullptr && (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t))) {
    return fail(ncclInvalidArgument,
                "ncclCommInitRankConfig: config was not initialised with NCCL_CONFIG_INITIALIZER");
  }
  if (nranks > 1) {
    return fail(ncclInvalidUsage, "the CUDA emulator's NCCL runs communicators of one rank only");
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return fail(ncclUnhandledCudaError, "ncclCommInitRankConfig: no current CUDA device");
  }
  *comm = new ncclComm{device, false};
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  comm->finalized = true;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;  // NULL is accepted, as by NCCL
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) {
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  }
  *async_error = ncclSuccess;  // one rank: nothing can fail asynchronously
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op < ncclSum || op >= ncclNumOps) {
    return fail(ncclInvalidArgument,
                "ncclAllReduce: invalid reduction " + std::to_string(static_cast<int>(op)));
  }
  return one_rank_collective("ncclAllReduce", send, receive, count, type, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (root != 0) {
    return fail(ncclInvalidArgument,
                "ncclBroadcast: root " + std::to_string(root) + " is not a rank of 1");
  }
  return one_rank_collective("ncclBroadcast", send, receive, count, type, comm, stream);
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) {
  return last_error().text;
}

}  // extern "C"
