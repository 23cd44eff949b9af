#include "parallel/nccl_process_group.h"

#ifdef ALLOY_HAVE_CUDA

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/error.h"
#include "parallel/socket.h"
#include "parallel/tcp_store.h"
#include "parallel/watchdog.h"

namespace alloy::parallel {

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUniqueIdKey = "alloy/nccl/unique_id";
// How often a waiting host thread polls an event or NCCL's state.
constexpr auto kPoll = std::chrono::microseconds(100);

std::string joined_key(int rank) {
  return "alloy/joined/" + std::to_string(rank);
}

std::string device_key(int rank) {
  return "alloy/nccl/device/" + std::to_string(rank);
}

// "HOST, PCI bus 0000:17:00.0": what makes a device the same device for two ranks.
std::string device_identity(Device device) {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  char bus[64] = {};
  ALLOY_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device.index), "reading the PCI bus of ",
                   device.str());
  return detail::concat(host, ", PCI bus ", bus);
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
      queued_(device.index) {
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
    // NCCL does not support two ranks on one device (it may hang): refuse it by name.
    const std::string identity = device_identity(device);
    store_->set(device_key(rank), std::vector<char>(identity.begin(), identity.end()));
    for (int other = 0; other < size; ++other) {
      if (other == rank) continue;
      const std::vector<char> theirs = store_->get(device_key(other));
      if (std::string(theirs.begin(), theirs.end()) == identity) {
        fail("rank ", other, " uses the same device (", identity,
             "): NCCL does not support two ranks on one device; use one device per rank, or the "
             "Gloo backend (--dist-backend gloo) to share a device");
      }
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
    if (state != ncclSuccess) fail("NCCL initialisation failed: ", nccl_cause(state));
    Watchdog::Hooks hooks;
    hooks.on_start = [index = device.index] {
      ALLOY_CUDA_CHECK(cudaSetDevice(index), "selecting cuda:", index, " for the NCCL watchdog");
    };
    hooks.health = [this] { return async_error(); };
    hooks.on_failure = [this](const std::string& what, const std::string& cause) {
      abort_with(what, cause);
    };
    watchdog_ = std::make_unique<Watchdog>(options.timeout, std::move(hooks));
  } catch (const Error& error) {
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    fail(here(), ": ", error.what());
  }
}

NcclProcessGroup::~NcclProcessGroup() {
  watchdog_.reset();  // nothing aborts the communicator behind our back from here on
  if (comm_ != nullptr) close_communicator();
  store_.reset();  // says goodbye
  // Rank 0's server answers the other ranks' last reads (the final gather): after a clean run
  // it stays until they have left.
  if (server_ != nullptr && failure_.empty()) server_->wait_for_ranks_to_leave(options_.timeout);
}

void NcclProcessGroup::close_communicator() noexcept {
  try {
    cuda::DeviceGuard guard(device_.index);
    // A non-blocking communicator is finalized (its queued work flushed) and polled before it
    // is destroyed; bounded by the timeout, after which, as after a failure, it is aborted.
    bool finalized = false;
    if (failure_.empty()) {
      ncclResult_t state = ncclCommFinalize(comm_);
      const auto deadline = Clock::now() + options_.timeout;
      while (state == ncclInProgress && Clock::now() < deadline) {
        std::this_thread::sleep_for(kPoll);
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
      }
      finalized = state == ncclSuccess;
    }
    static_cast<void>(finalized ? ncclCommDestroy(comm_) : ncclCommAbort(comm_));
  } catch (const Error&) {
    static_cast<void>(ncclCommAbort(comm_));  // the device could not even be selected
  }
}

std::string NcclProcessGroup::here() const {
  return detail::concat("rank ", rank_, " of ", size_, " on ", device_.str());
}

std::string NcclProcessGroup::departures() {
  return describe_departures(*store_, options_.timeout, master_);
}

// NCCL's status and its last error message, which says what went wrong (a peer's socket, ...).
std::string NcclProcessGroup::nccl_cause(ncclResult_t status) {
  const char* last = ncclGetLastError(comm_);
  std::string cause = cuda::status_text(status);
  if (last != nullptr && *last != '\0') cause += detail::concat(": ", last);
  return cause;
}

void NcclProcessGroup::check_usable(const std::string& what) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (failure_.empty()) return;
  lock.unlock();
  throw_unusable(what);
}

void NcclProcessGroup::throw_unusable(const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  fail(what, " on ", here(), ": the process group is unusable after an earlier failure (", failure_,
       ")");
}

// From the watchdog's thread: "" while NCCL reports no asynchronous error.
std::string NcclProcessGroup::async_error() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (comm_ == nullptr) return {};
  ncclResult_t state = ncclSuccess;
  const ncclResult_t got = ncclCommGetAsyncError(comm_, &state);
  if (got != ncclSuccess) return "ncclCommGetAsyncError failed: " + nccl_cause(got);
  if (state == ncclSuccess || state == ncclInProgress) return {};
  return nccl_cause(state);
}

// Aborts the communicator (which ends the kernels still waiting for peers) and records the
// first failure. Asks the store which rank left before taking the lock (that may take a
// second), and aborts after releasing it: no blocking call runs under the lock.
void NcclProcessGroup::abort_with(const std::string& what, const std::string& cause) {
  const std::string message =
      detail::concat(what, " failed on ", here(), ": ", departures(), "; nccl: ", cause);
  ncclComm_t aborted = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = message;
    aborted = std::exchange(comm_, nullptr);
  }
  // Outside the lock: the abort may take long (it ends the kernels still waiting for peers),
  // and every other thread only needs to see comm_ gone and the failure to throw it.
  if (aborted != nullptr) {
    static_cast<void>(ncclCommAbort(aborted));  // nothing more to do if even the abort fails
  }
}

void NcclProcessGroup::fail_operation(const std::string& what, const std::string& cause) {
  abort_with(what, cause);
  std::lock_guard<std::mutex> lock(mutex_);
  throw Error(failure_);
}

// With the lock held after a call returned ncclInProgress: polls until NCCL has queued the
// work, releasing the lock between polls so that the watchdog can still abort.
void NcclProcessGroup::wait_enqueued(const std::string& what, std::unique_lock<std::mutex>& lock) {
  const auto deadline = Clock::now() + options_.timeout;
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t got = ncclCommGetAsyncError(comm_, &state);
    if (got != ncclSuccess) state = got;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress || Clock::now() > deadline) {
      const std::string cause = state != ncclInProgress
                                    ? nccl_cause(state)
                                    : "not queued after " + seconds_str(options_.timeout);
      lock.unlock();
      fail_operation(what, cause);
    }
    lock.unlock();
    std::this_thread::sleep_for(kPoll);
    lock.lock();
    if (comm_ == nullptr) {  // the watchdog aborted it meanwhile
      lock.unlock();
      throw_unusable(what);
    }
  }
}

std::shared_ptr<cuda::Event> NcclProcessGroup::enqueue(const std::string& what,
                                                       const Tensor& tensor, cudaStream_t stream,
                                                       const Launch& launch) {
  check_usable(what);
  ALLOY_CHECK(tensor.device() == device_, what, " on ", here(), ": the tensor is on ",
              tensor.device().str());
  cuda::DeviceGuard guard(device_.index);
  if (stream == nullptr) stream = cuda::stream_of(device_);  // not the legacy default stream
  // Under a graph capture the collective becomes a node of the graph and runs at each launch:
  // nothing to follow now; follow_stream() follows each launch.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  ALLOY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing), "asking whether the stream of ", what,
                   " on ", here(), " is capturing");
  const bool captured = capturing != cudaStreamCaptureStatusNone;
  auto done = captured ? nullptr : std::make_shared<cuda::Event>(device_.index);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (comm_ == nullptr) {
      lock.unlock();
      throw_unusable(what);
    }
    const ncclResult_t launched = launch(comm_, stream);
    if (launched == ncclInProgress) {
      wait_enqueued(what, lock);
    } else if (launched != ncclSuccess) {
      const std::string cause = nccl_cause(launched);
      lock.unlock();
      fail_operation(what, cause);
    }
    if (captured) return nullptr;
    done->record(stream);
  }
  watchdog_->track(what, [done, what] { return done->done(what.c_str()); });
  return done;
}

void NcclProcessGroup::follow_stream(const std::string& what, StreamHandle stream) {
  check_usable(what);
  cuda::DeviceGuard guard(device_.index);
  auto done = std::make_shared<cuda::Event>(device_.index);
  done->record(stream == nullptr ? cuda::stream_of(device_) : stream);
  watchdog_->track(what, [done, what] { return done->done(what.c_str()); });
}

// Waits on the host for a collective's completion event. The watchdog bounds it: it fails the
// group at the timeout, which ends this wait too.
void NcclProcessGroup::await(const std::string& what, const cuda::Event& done) {
  while (true) {
    try {
      if (done.done(what.c_str())) return;
    } catch (const Error& error) {
      fail_operation(what, error.what());
    }
    check_usable(what);
    std::this_thread::sleep_for(kPoll);
  }
}

void NcclProcessGroup::run(const std::string& what, const Tensor& tensor, const Launch& launch) {
  check_usable(what);
  ALLOY_CHECK(tensor.device() == device_, what, " on ", here(), ": the tensor is on ",
              tensor.device().str());
  cuda::DeviceGuard guard(device_.index);
  const cudaStream_t compute = cuda::stream_of(device_);
  queued_.record(compute);
  queued_.wait(stream_.get());
  const std::shared_ptr<cuda::Event> done = enqueue(what, tensor, stream_.get(), launch);
  ALLOY_CHECK(done != nullptr, what, " on ", here(),
              ": a blocking collective cannot be captured in a CUDA graph");
  done->wait(compute);
  await(what, *done);
}

namespace {

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::average:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
  }
  return ncclSum;
}

// NCCL reduces f32 here; half tensors go through the half sum.
std::string f32_only(const std::string& what, const Tensor& tensor) {
  ALLOY_CHECK(tensor.dtype() == DType::f32, what,
              ": the NCCL group reduces f32 here; half tensors go through allreduce_half_sum");
  return what;
}

std::string allreduce_what(const Tensor& tensor, ReduceOp op) {
  return f32_only(allreduce_description(tensor, op), tensor);
}

}  // namespace

void NcclProcessGroup::allreduce(const Tensor& tensor, ReduceOp op) {
  const std::string what = allreduce_what(tensor, op);
  if (tensor.numel() == 0) return;
  run(what, tensor, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(tensor.raw(), tensor.raw(), static_cast<std::size_t>(tensor.numel()),
                         ncclFloat32, nccl_op(op), comm, stream);
  });
}

void NcclProcessGroup::allreduce_async(const Tensor& tensor, ReduceOp op, StreamHandle stream) {
  const std::string what = allreduce_what(tensor, op);
  if (tensor.numel() == 0) return;
  enqueue(what, tensor, stream, [&](ncclComm_t comm, cudaStream_t on) {
    return ncclAllReduce(tensor.raw(), tensor.raw(), static_cast<std::size_t>(tensor.numel()),
                         ncclFloat32, nccl_op(op), comm, on);
  });
}

namespace {

ncclResult_t half_sum(const Tensor& tensor, ncclComm_t comm, cudaStream_t stream) {
  return ncclAllReduce(tensor.raw(), tensor.raw(), static_cast<std::size_t>(tensor.numel()),
                       tensor.dtype() == DType::f16 ? ncclFloat16 : ncclBfloat16, ncclSum, comm,
                       stream);
}

ncclResult_t broadcast_bytes(const Tensor& tensor, int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(tensor.raw(), tensor.raw(), tensor.nbytes(), ncclUint8, root, comm, stream);
}

}  // namespace

void NcclProcessGroup::allreduce_half_sum(const Tensor& tensor) {
  const std::string what = half_sum_description(tensor);
  if (tensor.numel() == 0) return;
  run(what, tensor,
      [&](ncclComm_t comm, cudaStream_t stream) { return half_sum(tensor, comm, stream); });
}

void NcclProcessGroup::allreduce_half_sum_async(const Tensor& tensor, StreamHandle stream) {
  const std::string what = half_sum_description(tensor);
  if (tensor.numel() == 0) return;
  enqueue(what, tensor, stream,
          [&](ncclComm_t comm, cudaStream_t on) { return half_sum(tensor, comm, on); });
}

void NcclProcessGroup::broadcast(const Tensor& tensor, int root) {
  const std::string what = broadcast_description(tensor, root, size_);
  if (tensor.nbytes() == 0) return;
  run(what, tensor, [&](ncclComm_t comm, cudaStream_t stream) {
    return broadcast_bytes(tensor, root, comm, stream);
  });
}

void NcclProcessGroup::broadcast_async(const Tensor& tensor, int root, StreamHandle stream) {
  const std::string what = broadcast_description(tensor, root, size_);
  if (tensor.nbytes() == 0) return;
  enqueue(what, tensor, stream, [&](ncclComm_t comm, cudaStream_t on) {
    return broadcast_bytes(tensor, root, comm, on);
  });
}

void NcclProcessGroup::broadcast_group_async(const std::vector<Tensor>& tensors, int root,
                                             StreamHandle stream) {
  std::vector<Tensor> nonempty;
  for (const Tensor& tensor : tensors) {
    static_cast<void>(broadcast_description(tensor, root, size_));  // its checks
    if (tensor.nbytes() != 0) nonempty.push_back(tensor);
  }
  if (nonempty.empty()) return;
  if (nonempty.size() == 1) return broadcast_async(nonempty.front(), root, stream);
  std::int64_t bytes = 0;
  for (const Tensor& tensor : nonempty) {
    ALLOY_CHECK(tensor.device() == device_, "broadcast of ", tensor.str(), " on ", here(),
                ": the tensor is on ", tensor.device().str());
    bytes += static_cast<std::int64_t>(tensor.nbytes());
  }
  const std::string what = detail::concat("grouped broadcast of ", nonempty.size(), " tensors (",
                                          bytes, " bytes) from rank ", root);
  enqueue(what, nonempty.front(), stream, [&](ncclComm_t comm, cudaStream_t on) {
    ncclResult_t status = ncclGroupStart();
    for (std::size_t i = 0; i < nonempty.size() && status == ncclSuccess; ++i)
      status = broadcast_bytes(nonempty[i], root, comm, on);
    // The group is closed whatever happened inside it; the first failure is the one reported.
    const ncclResult_t ended = ncclGroupEnd();
    return status != ncclSuccess ? status : ended;
  });
}

namespace {

ncclDataType_t nccl_float_type(DType dtype) {
  return dtype == DType::f32 ? ncclFloat32 : dtype == DType::f16 ? ncclFloat16 : ncclBfloat16;
}

// One call per nonempty part (its element offset, its size and its rank) between
// ncclGroupStart and ncclGroupEnd; the group is closed whatever happened inside it, and the
// first failure is the one reported.
template <class Part>
ncclResult_t grouped_parts(const std::vector<std::int64_t>& counts, Part&& part) {
  ncclResult_t status = ncclGroupStart();
  std::int64_t offset = 0;
  for (std::size_t rank = 0; rank < counts.size() && status == ncclSuccess; ++rank) {
    if (counts[rank] > 0) status = part(offset, counts[rank], static_cast<int>(rank));
    offset += counts[rank];
  }
  const ncclResult_t ended = ncclGroupEnd();
  return status != ncclSuccess ? status : ended;
}

ncclResult_t reduce_parts(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const std::size_t element = dtype_size(tensor.dtype());
  auto* data = static_cast<char*>(tensor.raw());
  return grouped_parts(counts, [&](std::int64_t offset, std::int64_t count, int root) {
    char* at = data + static_cast<std::size_t>(offset) * element;
    return ncclReduce(at, at, static_cast<std::size_t>(count), nccl_float_type(tensor.dtype()), op,
                      root, comm, stream);
  });
}

ncclResult_t gather_parts(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                          ncclComm_t comm, cudaStream_t stream) {
  const std::size_t element = dtype_size(tensor.dtype());
  auto* data = static_cast<char*>(tensor.raw());
  return grouped_parts(counts, [&](std::int64_t offset, std::int64_t count, int root) {
    char* at = data + static_cast<std::size_t>(offset) * element;
    return ncclBroadcast(at, at, static_cast<std::size_t>(count) * element, ncclUint8, root, comm,
                         stream);
  });
}

}  // namespace

void NcclProcessGroup::reduce_scatter(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                                      ReduceOp op) {
  const std::string what = f32_only(reduce_scatter_description(tensor, counts, op, size_), tensor);
  if (tensor.numel() == 0) return;
  run(what, tensor, [&](ncclComm_t comm, cudaStream_t stream) {
    return reduce_parts(tensor, counts, nccl_op(op), comm, stream);
  });
}

void NcclProcessGroup::reduce_scatter_async(const Tensor& tensor,
                                            const std::vector<std::int64_t>& counts, ReduceOp op,
                                            StreamHandle stream) {
  const std::string what = f32_only(reduce_scatter_description(tensor, counts, op, size_), tensor);
  if (tensor.numel() == 0) return;
  enqueue(what, tensor, stream, [&](ncclComm_t comm, cudaStream_t on) {
    return reduce_parts(tensor, counts, nccl_op(op), comm, on);
  });
}

void NcclProcessGroup::reduce_scatter_half_sum(const Tensor& tensor,
                                               const std::vector<std::int64_t>& counts) {
  const std::string what = reduce_scatter_half_sum_description(tensor, counts, size_);
  if (tensor.numel() == 0) return;
  run(what, tensor, [&](ncclComm_t comm, cudaStream_t stream) {
    return reduce_parts(tensor, counts, ncclSum, comm, stream);
  });
}

void NcclProcessGroup::reduce_scatter_half_sum_async(const Tensor& tensor,
                                                     const std::vector<std::int64_t>& counts,
                                                     StreamHandle stream) {
  const std::string what = reduce_scatter_half_sum_description(tensor, counts, size_);
  if (tensor.numel() == 0) return;
  enqueue(what, tensor, stream, [&](ncclComm_t comm, cudaStream_t on) {
    return reduce_parts(tensor, counts, ncclSum, comm, on);
  });
}

void NcclProcessGroup::allgather(const Tensor& tensor, const std::vector<std::int64_t>& counts) {
  const std::string what = allgather_description(tensor, counts, size_);
  if (tensor.numel() == 0) return;
  run(what, tensor, [&](ncclComm_t comm, cudaStream_t stream) {
    return gather_parts(tensor, counts, comm, stream);
  });
}

void NcclProcessGroup::allgather_async(const Tensor& tensor,
                                       const std::vector<std::int64_t>& counts,
                                       StreamHandle stream) {
  const std::string what = allgather_description(tensor, counts, size_);
  if (tensor.numel() == 0) return;
  enqueue(what, tensor, stream,
          [&](ncclComm_t comm, cudaStream_t on) { return gather_parts(tensor, counts, comm, on); });
}

std::vector<std::string> NcclProcessGroup::allgather_bytes(const std::string& bytes) {
  const std::string what = "allgather of " + std::to_string(bytes.size()) + " bytes";
  check_usable(what);
  const std::string prefix = "alloy/gather/" + std::to_string(sequence_++) + "/";
  std::vector<std::string> gathered;
  try {
    store_->set(prefix + std::to_string(rank_), std::vector<char>(bytes.begin(), bytes.end()));
    for (int rank = 0; rank < size_; ++rank) {
      const std::vector<char> theirs = store_->get(prefix + std::to_string(rank));
      gathered.emplace_back(theirs.begin(), theirs.end());
    }
  } catch (const Error& error) {
    const std::string message =
        detail::concat(what, " failed on ", here(), ": ", departures(), "; ", error.what());
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = message;
    throw Error(message);
  }
  return gathered;
}

void NcclProcessGroup::barrier() {
  allgather_bytes(std::string());
}

}  // namespace alloy::parallel

#endif  // ALLOY_HAVE_CUDA
