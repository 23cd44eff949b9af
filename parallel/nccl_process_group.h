// NcclProcessGroup: collectives over CUDA tensors with NCCL, one process per device.
//
// The rendezvous is the same as GlooProcessGroup's: rank 0 serves a TCP store on the master
// address, every rank registers there (so that a rank that dies is named), and rank 0 publishes
// the NCCL unique id through it.
//
// The communicator is non-blocking (config.blocking = 0), so that no NCCL call can hang the
// host: with a blocking communicator a call may block inside NCCL (connecting to a peer that
// died, a full queue) where no timeout reaches it. The price is that a call may return
// ncclInProgress before its work is queued; the group then polls ncclCommGetAsyncError until
// the state leaves ncclInProgress (bounded by the timeout) before it records anything on the
// stream.
//
// Every collective's completion is an event that a watchdog thread polls, whichever stream it
// was queued on (the group's own, the caller's, a communication stream); a collective queued
// under a CUDA graph capture is a node of the graph instead, and each launch of the graph is
// followed through follow_stream. When one outlives
// the timeout, or NCCL reports an asynchronous error, the watchdog aborts the communicator
// (ncclCommAbort, which also ends the kernels waiting for a dead peer) and the group remembers
// the error: the operation (with dtype and shape), this rank, which rank left (asked of the
// store) and NCCL's message. The abort runs outside the group's mutex, which guards only the
// handle and the failure: no thread ever waits for a blocking NCCL call to take the lock. Every
// later call throws it. So a dead rank makes the others fail within the timeout even when no thread
// is waiting for the collective that hangs.
//
// The blocking collectives run on the group's own stream, ordered after the work already queued
// on the device's compute stream, the compute stream waits for them, and the host waits for
// their completion: the caller sees the same ordering as if they ran on its stream. The *_async
// ones are queued on the caller's stream and not waited for. allgather_bytes and barrier are
// host-side and go through the store.
//
// Built only with the CUDA backend (ALLOY_HAVE_CUDA).
#pragma once

#ifdef ALLOY_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/cuda/handles.h"
#include "core/device.h"
#include "parallel/process_group.h"

namespace alloy::parallel {

class TcpStore;
class TcpStoreServer;
class Watchdog;

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Joins the group of `size` ranks that meet at master_addr:master_port, with `device` (a
  // CUDA device) as this rank's. Errors as GlooProcessGroup's, plus NCCL's own.
  NcclProcessGroup(int rank, int size, const std::string& master_addr, int master_port,
                   Device device, const ProcessGroupOptions& options = {});
  ~NcclProcessGroup() override;
  NcclProcessGroup(const NcclProcessGroup&) = delete;
  NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // f32 is summed or averaged (ncclAvg) in f32. Half tensors are refused: widening them needs
  // conversion kernels, which data parallelism runs itself (into f32 buckets) on the GPU.
  void allreduce(const Tensor& tensor, ReduceOp op) override;
  // ncclHalf / ncclBfloat16 sums.
  void allreduce_half_sum(const Tensor& tensor) override;
  void broadcast(const Tensor& tensor, int root) override;
  // One ncclReduce per nonempty part, to its rank, in one group (f32 for reduce_scatter, as
  // allreduce; ncclHalf / ncclBfloat16 sums for the half sum). allgather: one ncclBroadcast of
  // each nonempty part from its rank, in one group (the parts may differ in size, which
  // ncclAllGather does not allow).
  void reduce_scatter(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                      ReduceOp op) override;
  void reduce_scatter_half_sum(const Tensor& tensor,
                               const std::vector<std::int64_t>& counts) override;
  void allgather(const Tensor& tensor, const std::vector<std::int64_t>& counts) override;
  std::vector<std::string> allgather_bytes(const std::string& bytes) override;
  void barrier() override;

  // Queued on `stream` (a stream of this group's device) with no host wait; the watchdog tracks
  // their completion. Same dtype rules as the blocking calls.
  void allreduce_async(const Tensor& tensor, ReduceOp op, StreamHandle stream) override;
  void allreduce_half_sum_async(const Tensor& tensor, StreamHandle stream) override;
  void broadcast_async(const Tensor& tensor, int root, StreamHandle stream) override;
  void reduce_scatter_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                            ReduceOp op, StreamHandle stream) override;
  void reduce_scatter_half_sum_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                                     StreamHandle stream) override;
  void allgather_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                       StreamHandle stream) override;
  // The broadcasts between one ncclGroupStart and ncclGroupEnd: one launch, one completion.
  void broadcast_group_async(const std::vector<Tensor>& tensors, int root,
                             StreamHandle stream) override;

  // The watchdog follows the work queued on `stream` so far (a replayed graph's collectives).
  void follow_stream(const std::string& what, StreamHandle stream) override;

  // The group's own stream, on which the blocking collectives run.
  cudaStream_t stream() const { return stream_.get(); }

 private:
  // Issues one NCCL call on the communicator and stream given.
  using Launch = std::function<ncclResult_t(ncclComm_t comm, cudaStream_t stream)>;
  std::shared_ptr<cuda::Event> enqueue(const std::string& what, const Tensor& tensor,
                                       cudaStream_t stream, const Launch& launch);
  void run(const std::string& what, const Tensor& tensor, const Launch& launch);
  void wait_enqueued(const std::string& what, std::unique_lock<std::mutex>& lock);
  void await(const std::string& what, const cuda::Event& done);
  void check_usable(const std::string& what);
  [[noreturn]] void throw_unusable(const std::string& what);
  std::string async_error();
  void abort_with(const std::string& what, const std::string& cause);
  // Finalizes and destroys the communicator, or aborts it after a failure or a timeout.
  void close_communicator() noexcept;
  [[noreturn]] void fail_operation(const std::string& what, const std::string& cause);
  std::string nccl_cause(ncclResult_t status);
  std::string departures();
  std::string here() const;

  int rank_;
  int size_;
  Device device_;
  ProcessGroupOptions options_;
  std::string master_;
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only
  std::unique_ptr<TcpStore> store_;
  cuda::Stream stream_;
  cuda::Event queued_;          // the compute stream's work before a blocking collective
  std::uint64_t sequence_ = 0;  // numbers the store-based operations
  // Guards the communicator and the failure against the watchdog, which aborts the one and
  // sets the other from its own thread.
  std::mutex mutex_;
  ncclComm_t comm_ = nullptr;  // null once aborted
  std::string failure_;        // the first failure; the group is unusable after it
  std::unique_ptr<Watchdog> watchdog_;
};

}  // namespace alloy::parallel

#endif  // ALLOY_HAVE_CUDA
