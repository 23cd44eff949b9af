#include "parallel/nccl_process_group.h"

#ifdef ALLOY_HAVE_CUDA

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/error.h"
#include "parallel/socket.h"
#include "parallel/tcp_store.h"

namespace alloy::parallel {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUniqueIdKey = "alloy/nccl/unique_id";

std::string describe(const char* operation, const Tensor& tensor) {
  return detail::concat(operation, " of ", dtype_name(tensor.dtype()), shape_str(tensor.shape()));
}

std::string joined_key(int rank) {
  return "alloy/joined/" + std::to_string(rank);
}

}  // namespace

NcclProcessGroup::NcclProcessGroup(int rank, int size, const std::string& master_addr,
                                   int master_port, Device device,
                                   const ProcessGroupOptions& options)
    : rank_(rank),
      size_(size),
      device_(device),
      options_(options),
      master_(endpoint_str(master_addr, master_port)),
      stream_(device.index),
      queued_(device.index),
      done_(device.index) {
  ALLOY_CHECK(size >= 1 && rank >= 0 && rank < size, "process group: rank ", rank,
              " does not exist in a world of size ", size);
  ALLOY_CHECK(device.is_cuda(), here(), ": the NCCL process group needs a CUDA device, not ",
              device.str());
  try {
    if (rank == 0) server_ = std::make_unique<TcpStoreServer>(master_addr, master_port);
    store_ = std::make_unique<TcpStore>(master_addr, master_port, options.timeout);
    store_->join_as(rank);
    const std::string world = std::to_string(size);
    store_->set(joined_key(rank), std::vector<char>(world.begin(), world.end()));
    std::vector<std::string> keys;
    for (int other = 0; other < size; ++other)
      keys.push_back(joined_key(other));
    const auto missing = store_->missing_after(keys, options.timeout);
    if (!missing.empty()) {
      fail("rendezvous at ", master_, " timed out after ", seconds_str(options.timeout), ": ",
           missing.size(), " of ", size, " ranks did not join (first: ", missing.front(), ")");
    }
    ncclUniqueId id;
    if (rank == 0) {
      ALLOY_CUDA_CHECK(ncclGetUniqueId(&id), "creating the NCCL id on ", here());
      const auto* bytes = reinterpret_cast<const char*>(&id);
      store_->set(kUniqueIdKey, std::vector<char>(bytes, bytes + sizeof id));
    }
    const std::vector<char> bytes = store_->get(kUniqueIdKey);
    ALLOY_CHECK(bytes.size() == sizeof id, "the NCCL id from rank 0 has ", bytes.size(),
                " bytes instead of ", sizeof id);
    std::memcpy(&id, bytes.data(), sizeof id);

    cuda::DeviceGuard guard(device.index);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every wait below is ours, and bounded
    const ncclResult_t started = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      fail("ncclCommInitRankConfig failed: ", cuda::status_text(started));
    }
    const auto deadline = Clock::now() + options.timeout;
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      ALLOY_CUDA_CHECK(ncclCommGetAsyncError(comm_, &state), "initialising NCCL on ", here());
      if (state == ncclInProgress && Clock::now() > deadline) {
        fail("NCCL initialisation timed out after ", seconds_str(options.timeout));
      }
      if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (state != ncclSuccess) fail("NCCL initialisation failed: ", cuda::status_text(state));
  } catch (const Error& error) {
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    fail(here(), ": ", error.what());
  }
}

NcclProcessGroup::~NcclProcessGroup() {
  if (comm_ == nullptr) return;
  cuda::DeviceGuard guard(device_.index);
  // After a failure, pending operations may never finish: abort rather than wait for them.
  if (failure_.empty()) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
}

std::string NcclProcessGroup::here() const {
  return detail::concat("rank ", rank_, " of ", size_, " on ", device_.str());
}

std::string NcclProcessGroup::departures() {
  return describe_departures(*store_, options_.timeout, master_);
}

void NcclProcessGroup::fail_operation(const std::string& what, const std::string& cause) {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  failure_ = detail::concat(what, " failed on ", here(), ": ", departures(), "; nccl: ", cause);
  throw Error(failure_);
}

// Waits for the collective just queued on the group's stream, NCCL's asynchronous errors and
// the timeout, whichever comes first.
void NcclProcessGroup::await(const std::string& what) {
  const auto deadline = Clock::now() + options_.timeout;
  while (true) {
    const cudaError_t query = cudaEventQuery(done_.get());
    if (query == cudaSuccess) return;
    if (query != cudaErrorNotReady) fail_operation(what, cuda::status_text(query));
    ncclResult_t state = ncclSuccess;
    const ncclResult_t got = ncclCommGetAsyncError(comm_, &state);
    if (got != ncclSuccess) fail_operation(what, cuda::status_text(got));
    if (state != ncclSuccess && state != ncclInProgress) {
      fail_operation(what, cuda::status_text(state));
    }
    if (Clock::now() > deadline) {
      fail_operation(what, "timed out after " + seconds_str(options_.timeout));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

template <class Launch>
void NcclProcessGroup::run(const std::string& what, const Tensor& tensor, Launch&& launch) {
  if (!failure_.empty()) {
    fail(what, " on ", here(), ": the process group is unusable after an earlier failure (",
         failure_, ")");
  }
  ALLOY_CHECK(tensor.device() == device_, what, " on ", here(), ": the tensor is on ",
              tensor.device().str());
  cuda::DeviceGuard guard(device_.index);
  const cudaStream_t compute = cuda::stream_of(device_);
  queued_.record(compute);
  queued_.wait(stream_.get());
  const ncclResult_t launched = launch();
  if (launched != ncclSuccess && launched != ncclInProgress) {
    fail_operation(what, cuda::status_text(launched));
  }
  done_.record(stream_.get());
  done_.wait(compute);
  await(what);
}

void NcclProcessGroup::allreduce(const Tensor& tensor, ReduceOp op) {
  const std::string what =
      describe(op == ReduceOp::sum ? "allreduce_sum" : "allreduce_average", tensor);
  ALLOY_CHECK(tensor.dtype() == DType::f32, what,
              ": the NCCL group reduces f32 here; half tensors go through allreduce_half_sum");
  if (tensor.numel() == 0) return;
  run(what, tensor, [&] {
    return ncclAllReduce(tensor.raw(), tensor.raw(), static_cast<std::size_t>(tensor.numel()),
                         ncclFloat32, op == ReduceOp::sum ? ncclSum : ncclAvg, comm_,
                         stream_.get());
  });
}

void NcclProcessGroup::allreduce_half_sum(const Tensor& tensor) {
  const std::string what = describe("allreduce_half_sum", tensor);
  ALLOY_CHECK(tensor.dtype() == DType::f16 || tensor.dtype() == DType::bf16, what,
              ": only f16 and bf16 tensors are summed in half precision");
  if (tensor.numel() == 0) return;
  run(what, tensor, [&] {
    return ncclAllReduce(tensor.raw(), tensor.raw(), static_cast<std::size_t>(tensor.numel()),
                         tensor.dtype() == DType::f16 ? ncclFloat16 : ncclBfloat16, ncclSum, comm_,
                         stream_.get());
  });
}

void NcclProcessGroup::broadcast(const Tensor& tensor, int root) {
  const std::string what = describe("broadcast", tensor) + " from rank " + std::to_string(root);
  ALLOY_CHECK(root >= 0 && root < size_, what, ": no such rank in a world of size ", size_);
  if (tensor.nbytes() == 0) return;
  run(what, tensor, [&] {
    return ncclBroadcast(tensor.raw(), tensor.raw(), tensor.nbytes(), ncclUint8, root, comm_,
                         stream_.get());
  });
}

std::vector<std::string> NcclProcessGroup::allgather_bytes(const std::string& bytes) {
  const std::string what = "allgather of " + std::to_string(bytes.size()) + " bytes";
  if (!failure_.empty()) {
    fail(what, " on ", here(), ": the process group is unusable after an earlier failure (",
         failure_, ")");
  }
  const std::string prefix = "alloy/gather/" + std::to_string(sequence_++) + "/";
  std::vector<std::string> gathered;
  try {
    store_->set(prefix + std::to_string(rank_), std::vector<char>(bytes.begin(), bytes.end()));
    for (int rank = 0; rank < size_; ++rank) {
      const std::vector<char> theirs = store_->get(prefix + std::to_string(rank));
      gathered.emplace_back(theirs.begin(), theirs.end());
    }
  } catch (const Error& error) {
    failure_ = detail::concat(what, " failed on ", here(), ": ", departures(), "; ", error.what());
    throw Error(failure_);
  }
  return gathered;
}

void NcclProcessGroup::barrier() {
  allgather_bytes(std::string());
}

}  // namespace alloy::parallel

#endif  // ALLOY_HAVE_CUDA
