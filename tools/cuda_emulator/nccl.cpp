// Emulated NCCL: communicators of one or more ranks, each rank its own process on this machine
// as the project runs them (nccl_world.h: the rendezvous and transport through shared memory).
// Init with a config, blocking or not, finalize/destroy/abort, async error queries, the error
// strings, all-reduce, reduce and broadcast as stream work, and groups (ncclGroupStart/End). In a
// group each collective is queued when it is called rather than at ncclGroupEnd: every rank
// runs its stream's work in order, so the result and the order of the collectives are the
// same. Collectives queued on a capturing stream become nodes of its graph, as NCCL's kernels
// do, and run at every launch of the graph. The work of a collective, when its
// stream runs it, moves the buffers through every rank's staging area in chunks: each rank
// copies its chunk in, all meet at a barrier, each reduces the chunks in rank order into its
// receive buffer, all meet again. A rank that aborts, leaves or dies ends its peers' waits with
// ncclRemoteError naming it, as the project's watchdog expects of NCCL.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>

#include "tools/cuda_emulator/emulator.h"
#include "tools/cuda_emulator/nccl_world.h"

namespace alloy::emulator::nccl {

// What a communicator's handle and its queued collectives share: queued work keeps the world
// mapped until it has run, even after the handle was destroyed (as NCCL's kernels finish).
struct Communicator {
  int rank = 0;
  int nranks = 1;
  std::atomic<bool> aborted{false};
  // ncclInProgress while joining, then ncclSuccess until a failure.
  std::atomic<ncclResult_t> state{ncclInProgress};
  std::unique_ptr<World> world;  // set before `state` leaves ncclInProgress
  std::thread joining;           // a non-blocking init's rendezvous
};

}  // namespace alloy::emulator::nccl

struct ncclComm {
  std::shared_ptr<alloy::emulator::nccl::Communicator> shared;
  bool finalized = false;
};

namespace {

using alloy::emulator::nccl::Communicator;
using alloy::emulator::nccl::Operation;
using alloy::emulator::nccl::Status;
using alloy::emulator::nccl::World;

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

// Makes `status` the communicator's asynchronous error, unless an earlier one is.
void fail_async(Communicator& comm, const Status& status) {
  ncclResult_t expected = ncclSuccess;
  if (comm.state.compare_exchange_strong(expected, status.result)) fail(status.result, status.text);
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

const char* type_name(std::int32_t type) {
  switch (type) {
    case ncclInt8:
      return "ncclInt8";
    case ncclUint8:
      return "ncclUint8";
    case ncclInt32:
      return "ncclInt32";
    case ncclUint32:
      return "ncclUint32";
    case ncclInt64:
      return "ncclInt64";
    case ncclUint64:
      return "ncclUint64";
    case ncclFloat16:
      return "ncclFloat16";
    case ncclFloat32:
      return "ncclFloat32";
    case ncclFloat64:
      return "ncclFloat64";
    case ncclBfloat16:
      return "ncclBfloat16";
    case ncclFloat8e4m3:
      return "ncclFloat8e4m3";
    default:
      return "ncclFloat8e5m2";
  }
}

const char* operation_name(std::int32_t op) {
  switch (op) {
    case ncclSum:
      return "ncclSum";
    case ncclProd:
      return "ncclProd";
    case ncclMax:
      return "ncclMax";
    case ncclMin:
      return "ncclMin";
    default:
      return "ncclAvg";
  }
}

constexpr std::int32_t kAllReduce = 0;
constexpr std::int32_t kBroadcast = 1;
constexpr std::int32_t kReduce = 2;

// "ncclAllReduce (ncclSum) of 1000 x ncclFloat32", "ncclBroadcast from rank 2 of 16 x ncclUint8",
// "ncclReduce (ncclSum) to rank 1 of 8 x ncclFloat16"
std::string describe(const Operation& operation) {
  std::string what;
  if (operation.kind == kAllReduce) {
    what = std::string("ncclAllReduce (") + operation_name(operation.op) + ")";
  } else if (operation.kind == kReduce) {
    what = std::string("ncclReduce (") + operation_name(operation.op) + ") to rank " +
           std::to_string(operation.root);
  } else {
    what = "ncclBroadcast from rank " + std::to_string(operation.op);
  }
  return what + " of " + std::to_string(operation.count) + " x " + type_name(operation.type);
}

// --- reductions: out[i] = in[0][i] op in[1][i] op ... in rank order ---

// A floating type's arithmetic: values load into Compute, and every result is rounded back to
// the storage type before the next step, as NCCL's reduction functions compute per element.
struct Half {
  using Storage = __half;
  static float load(__half value) { return __half2float(value); }
  static __half store(float value) { return __float2half_rn(value); }
  static __half from_double(double value) { return __double2half(value); }
};
struct Bfloat16 {
  using Storage = __nv_bfloat16;
  static float load(__nv_bfloat16 value) { return __bfloat162float(value); }
  static __nv_bfloat16 store(float value) { return __float2bfloat16_rn(value); }
  static __nv_bfloat16 from_double(double value) { return __double2bfloat16(value); }
};
template <typename T>
struct Native {
  using Storage = T;
  static T load(T value) { return value; }
  // Through memory, so that gcc cannot fuse a pre-multiplied input and the sum it enters into
  // one FMA (it contracts across inlined calls): NCCL rounds the product first.
  static T store(T value) {
    const volatile T rounded = value;
    return rounded;
  }
  static T from_double(double value) { return static_cast<T>(value); }
};

// One step of a reduction over two values; `add` and `multiply` are the type's own.
template <typename V, typename Add, typename Multiply>
V combine(ncclRedOp_t op, V a, V b, Add add, Multiply multiply) {
  switch (op) {
    case ncclProd:
      return multiply(a, b);
    case ncclMax:
      return std::max(a, b);
    case ncclMin:
      return std::min(a, b);
    default:  // ncclSum, ncclAvg
      return add(a, b);
  }
}

template <typename Type>
void reduce_floating(const World& world, ncclRedOp_t op, std::size_t count, void* out) {
  using T = typename Type::Storage;
  using Compute = decltype(Type::load(T{}));
  // ncclAvg: NCCL multiplies every input by 1/nranks rounded to the type, then sums.
  const Compute scale = Type::load(Type::from_double(1.0 / world.nranks()));
  const auto input = [&](int rank, std::size_t i) {
    const Compute value = Type::load(reinterpret_cast<const T*>(world.staging(rank))[i]);
    return op == ncclAvg ? Type::load(Type::store(value * scale)) : value;
  };
  for (std::size_t i = 0; i < count; ++i) {
    Compute result = input(0, i);
    for (int rank = 1; rank < world.nranks(); ++rank) {
      result = combine(op, result, input(rank, i), std::plus<>(), std::multiplies<>());
      result = Type::load(Type::store(result));
    }
    static_cast<T*>(out)[i] = Type::store(result);
  }
}

// Integers wrap around (computed unsigned); ncclAvg divides the sum, as NCCL does for them.
template <typename T>
void reduce_integer(const World& world, ncclRedOp_t op, std::size_t count, void* out) {
  using U = std::make_unsigned_t<T>;
  for (std::size_t i = 0; i < count; ++i) {
    T result = reinterpret_cast<const T*>(world.staging(0))[i];
    for (int rank = 1; rank < world.nranks(); ++rank) {
      result = combine(
          op, result, reinterpret_cast<const T*>(world.staging(rank))[i],
          [](T a, T b) { return static_cast<T>(static_cast<U>(a) + static_cast<U>(b)); },
          [](T a, T b) { return static_cast<T>(static_cast<U>(a) * static_cast<U>(b)); });
    }
    if (op == ncclAvg) result = static_cast<T>(result / static_cast<T>(world.nranks()));
    static_cast<T*>(out)[i] = result;
  }
}

void reduce(const World& world, ncclDataType_t type, ncclRedOp_t op, std::size_t count, void* out) {
  switch (type) {
    case ncclInt8:
      return reduce_integer<std::int8_t>(world, op, count, out);
    case ncclUint8:
      return reduce_integer<std::uint8_t>(world, op, count, out);
    case ncclInt32:
      return reduce_integer<std::int32_t>(world, op, count, out);
    case ncclUint32:
      return reduce_integer<std::uint32_t>(world, op, count, out);
    case ncclInt64:
      return reduce_integer<std::int64_t>(world, op, count, out);
    case ncclUint64:
      return reduce_integer<std::uint64_t>(world, op, count, out);
    case ncclFloat16:
      return reduce_floating<Half>(world, op, count, out);
    case ncclBfloat16:
      return reduce_floating<Bfloat16>(world, op, count, out);
    case ncclFloat32:
      return reduce_floating<Native<float>>(world, op, count, out);
    default:  // ncclFloat64; fp8 is refused before it is queued
      return reduce_floating<Native<double>>(world, op, count, out);
  }
}

// --- collectives ---

// The work of a collective when its stream runs it.
void run_collective(Communicator& comm, const char* name, const Operation& operation,
                    const void* send, void* receive) {
  // After an abort or an earlier failure NCCL's kernels do not run: the buffers stay as they are.
  if (comm.aborted.load() || comm.state.load() != ncclSuccess) return;
  const auto type = static_cast<ncclDataType_t>(operation.type);
  const std::size_t element = type_size(type);
  const std::size_t bytes = operation.count * element;
  // A broadcast reads the send buffer of its root only; a reduce writes its root's receive
  // buffer only.
  const bool sends = operation.kind != kBroadcast || operation.op == comm.rank;
  const bool receives = operation.kind != kReduce || operation.root == comm.rank;
  if (sends) {
    alloy::emulator::require_device_range(send, bytes, std::string(name) + " send buffer");
  }
  if (receives) {
    alloy::emulator::require_device_range(receive, bytes, std::string(name) + " receive buffer");
  }
  if (comm.nranks == 1) {  // every reduction of one buffer is the buffer: NCCL copies it
    if (send != receive && receives) std::memmove(receive, send, bytes);
    return;
  }
  World& world = *comm.world;
  const std::string what = describe(operation);
  const std::size_t chunk = world.staging_bytes() / element;
  for (std::size_t first = 0; first < operation.count; first += chunk) {
    const std::size_t elements = std::min(chunk, operation.count - first);
    const std::size_t offset = first * element;
    if (sends) {
      std::memcpy(world.staging(comm.rank), static_cast<const unsigned char*>(send) + offset,
                  elements * element);
    }
    if (first == 0) world.announce(operation);
    Status status = world.barrier(what, comm.aborted);
    if (!status.ok()) return fail_async(comm, status);
    if (first == 0) {
      // Every rank compares every announcement with rank 0's, so all of them stop here alike.
      for (int rank = 1; rank < comm.nranks; ++rank) {
        const Operation& theirs = world.announced(rank);
        const Operation& zeros = world.announced(0);
        if (theirs.kind != zeros.kind || theirs.type != zeros.type || theirs.op != zeros.op ||
            theirs.count != zeros.count || theirs.root != zeros.root) {
          return fail_async(comm, {ncclInvalidUsage,
                                   "mismatched collectives: rank 0 called " + describe(zeros) +
                                       ", rank " + std::to_string(rank) + " " + describe(theirs)});
        }
      }
    }
    unsigned char* out = static_cast<unsigned char*>(receive) + offset;
    if (operation.kind != kBroadcast) {
      if (receives) reduce(world, type, static_cast<ncclRedOp_t>(operation.op), elements, out);
    } else {
      std::memcpy(out, world.staging(operation.op), elements * element);
    }
    // Nobody refills a staging area before every rank has read it.
    status = world.barrier(what, comm.aborted);
    if (!status.ok()) return fail_async(comm, status);
  }
}

// Checks common to the collectives, then queues the work on `stream`.
ncclResult_t collective(const char* name, const Operation& operation, const void* send,
                        void* receive, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(name) + ": comm is NULL");
  if (comm->finalized) {
    return fail(ncclInvalidUsage,
                std::string(name) + ": the communicator was finalized; no collective may follow");
  }
  const std::shared_ptr<Communicator>& shared = comm->shared;
  const ncclResult_t state = shared->state.load();
  if (state == ncclInProgress) {
    return fail(ncclInvalidArgument,
                std::string(name) + ": the communicator is still being initialised");
  }
  if (state != ncclSuccess) {
    return fail(state, std::string(name) + ": the communicator failed earlier (" +
                           ncclGetErrorString(state) + ")");
  }
  const auto type = static_cast<ncclDataType_t>(operation.type);
  if (type_size(type) == 0) {
    return fail(ncclInvalidArgument,
                std::string(name) + ": invalid data type " + std::to_string(operation.type));
  }
  if (operation.kind != kBroadcast && shared->nranks > 1 &&
      (type == ncclFloat8e4m3 || type == ncclFloat8e5m2)) {
    return fail(ncclInvalidUsage,
                std::string(name) + ": the CUDA emulator's NCCL does not reduce fp8 across ranks");
  }
  if (operation.count == 0) return ncclSuccess;
  const cudaError_t queued =
      alloy::emulator::enqueue(stream, {name, [shared, name, operation, send, receive] {
                                          run_collective(*shared, name, operation, send, receive);
                                        }});
  if (queued != cudaSuccess) {
    return fail(ncclUnhandledCudaError, std::string(name) + ": queuing on the stream failed: " +
                                            cudaGetErrorString(queued));
  }
  return ncclSuccess;
}

// Ends the handle's part in the communicator; an abort also ends whatever waits.
void release(ncclComm_t comm, bool abort) {
  Communicator& shared = *comm->shared;
  // A communicator still joining stops joining either way.
  if (abort || shared.state.load() == ncclInProgress) shared.aborted.store(true);
  if (shared.joining.joinable()) shared.joining.join();
  if (abort && shared.world) shared.world->leave();
  delete comm;  // the world is unmapped once queued work holds it no longer
}

// Nesting depth of the calling thread's groups: an unmatched ncclGroupEnd is an error.
thread_local int group_depth = 0;

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  alloy::emulator::nccl::make_unique_id(*id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
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
  int device = 0;  // NCCL binds a communicator to the current device, so there must be one
  if (cudaGetDevice(&device) != cudaSuccess) {
    return fail(ncclUnhandledCudaError, "ncclCommInitRankConfig: no current CUDA device");
  }
  auto shared = std::make_shared<Communicator>();
  shared->rank = rank;
  shared->nranks = nranks;
  // NCCL_CONFIG_INITIALIZER leaves `blocking` undefined, which NCCL takes as blocking.
  if (config == nullptr || config->blocking != 0) {
    Status status;
    shared->world = World::join(id, nranks, rank, shared->aborted, status);
    if (!shared->world) return fail(status.result, "ncclCommInitRankConfig: " + status.text);
    shared->state.store(ncclSuccess);
    *comm = new ncclComm{std::move(shared), false};
    return ncclSuccess;
  }
  // Non-blocking: the rendezvous completes on a thread; ncclCommGetAsyncError reports it.
  Communicator& joining = *shared;
  shared->joining = std::thread([&joining, id, nranks, rank] {
    Status status;
    std::unique_ptr<World> world = World::join(id, nranks, rank, joining.aborted, status);
    if (!world) {
      fail(status.result, "ncclCommInitRankConfig: " + status.text);
      joining.state.store(status.result);
      return;
    }
    joining.world = std::move(world);
    joining.state.store(ncclSuccess);
  });
  *comm = new ncclComm{std::move(shared), false};
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  comm->finalized = true;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm != nullptr) release(comm, false);  // NULL is accepted, as by NCCL
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm != nullptr) release(comm, true);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) {
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  }
  *async_error = comm->shared->state.load();
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* receive, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (op < ncclSum || op >= ncclNumOps) {
    return fail(ncclInvalidArgument,
                "ncclAllReduce: invalid reduction " + std::to_string(static_cast<int>(op)));
  }
  return collective(
      "ncclAllReduce",
      {kAllReduce, static_cast<std::int32_t>(type), static_cast<std::int32_t>(op), count}, send,
      receive, comm, stream);
}

ncclResult_t ncclReduce(const void* send, void* receive, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (op < ncclSum || op >= ncclNumOps) {
    return fail(ncclInvalidArgument,
                "ncclReduce: invalid reduction " + std::to_string(static_cast<int>(op)));
  }
  if (comm != nullptr && (root < 0 || root >= comm->shared->nranks)) {
    return fail(ncclInvalidArgument, "ncclReduce: root " + std::to_string(root) +
                                         " is not a rank of " +
                                         std::to_string(comm->shared->nranks));
  }
  return collective(
      "ncclReduce",
      {kReduce, static_cast<std::int32_t>(type), static_cast<std::int32_t>(op), count, root}, send,
      receive, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* receive, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (comm != nullptr && (root < 0 || root >= comm->shared->nranks)) {
    return fail(ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root) +
                                         " is not a rank of " +
                                         std::to_string(comm->shared->nranks));
  }
  return collective("ncclBroadcast", {kBroadcast, static_cast<std::int32_t>(type), root, count},
                    send, receive, comm, stream);
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: no group was started");
  --group_depth;
  return ncclSuccess;
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
