// NcclProcessGroup: collectives over CUDA tensors with NCCL, one process per device.
//
// The rendezvous is the same as GlooProcessGroup's: rank 0 serves a TCP store on the master
// address, every rank registers there (so that a rank that dies is named), and rank 0 publishes
// the NCCL unique id through it. The communicator is created non-blocking, so that every
// operation can be bounded: the host polls for completion, NCCL's asynchronous error and the
// group's timeout, and on failure aborts the communicator (ncclCommAbort) and throws an
// alloy::Error naming the operation and the rank that left. After a failure the group is
// unusable.
//
// Tensor collectives run on the group's own stream (a side stream), ordered after the work
// already queued on the device's compute stream, and the compute stream waits for them: the
// caller sees the same ordering as if they ran on its stream. allgather_bytes and barrier are
// host-side and go through the store.
//
// Built only with the CUDA backend (ALLOY_HAVE_CUDA).
#pragma once

#ifdef ALLOY_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/cuda/handles.h"
#include "core/device.h"
#include "parallel/process_group.h"

namespace alloy::parallel {

class TcpStore;
class TcpStoreServer;

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
  std::vector<std::string> allgather_bytes(const std::string& bytes) override;
  void barrier() override;

  // The communication stream, for data parallelism's overlapped bucket reductions.
  cudaStream_t stream() const { return stream_.get(); }

 private:
  template <class Launch>
  void run(const std::string& what, const Tensor& tensor, Launch&& launch);
  void await(const std::string& what);
  [[noreturn]] void fail_operation(const std::string& what, const std::string& cause);
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
  cuda::Event queued_;  // the compute stream's work before a collective
  cuda::Event done_;    // the collective's completion
  ncclComm_t comm_ = nullptr;
  std::uint64_t sequence_ = 0;  // numbers the store-based operations
  std::string failure_;
};

}  // namespace alloy::parallel

#endif  // ALLOY_HAVE_CUDA
