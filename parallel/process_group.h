// ProcessGroup: the collectives that data parallelism needs, over the ranks of one job.
// Implementations: GlooProcessGroup (CPU tensors over TCP, and CUDA tensors staged through
// pinned host memory); NcclProcessGroup (CUDA tensors, one device per rank).
//
// Every rank calls the same operations in the same order with tensors of the same shape and
// dtype. Tensors live on the CPU or, for the groups that say so, on a CUDA device; on a device
// the collectives are stream-ordered like any other device work (see the *_async calls). Each
// operation is bounded by the group's timeout: when a peer dies or stalls, it throws an
// alloy::Error that names the operation, the rank that left when known, and the cause, instead of
// hanging. After such a failure the group is unusable; every later call throws. A group serves one
// thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

// cudaStream_t is CUstream_st*: named here so that code without CUDA's headers can pass one on.
struct CUstream_st;

namespace alloy::parallel {

using StreamHandle = CUstream_st*;

struct ProcessGroupOptions {
  // Bounds every collective, the rendezvous, and the wait for the master to come up.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

enum class ReduceOp { sum, average, max };

// What a collective's errors call it ("allreduce_sum of f16[1024]"), after the checks every
// backend shares: a floating dtype for allreduce, a half dtype for allreduce_half_sum, an
// existing root for broadcast. Backends add their own checks.
std::string allreduce_description(const Tensor& tensor, ReduceOp op);
std::string half_sum_description(const Tensor& tensor);
std::string broadcast_description(const Tensor& tensor, int root, int world_size);
// For the part collectives below: what allreduce_description / half_sum_description check, and
// counts with one entry >= 0 per rank summing to the tensor's elements.
std::string reduce_scatter_description(const Tensor& tensor,
                                       const std::vector<std::int64_t>& counts, ReduceOp op,
                                       int world_size);
std::string reduce_scatter_half_sum_description(const Tensor& tensor,
                                                const std::vector<std::int64_t>& counts,
                                                int world_size);
std::string allgather_description(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                                  int world_size);

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Replaces `tensor` on every rank with the elementwise sum (or mean) over all ranks; every
  // rank ends with the same bits. f32 is reduced in f32. f16 and bf16 are widened to f32,
  // reduced (and divided) there, and rounded to the half type once, so no intermediate sum
  // overflows or loses bits to half rounding.
  virtual void allreduce(const Tensor& tensor, ReduceOp op) = 0;
  void allreduce_sum(const Tensor& tensor) { allreduce(tensor, ReduceOp::sum); }
  void allreduce_average(const Tensor& tensor) { allreduce(tensor, ReduceOp::average); }

  // Sums an f16 or bf16 tensor in its own precision, on the wire and in every addition (half
  // the traffic of allreduce's widening): each partial sum is rounded to the half type, so the
  // result depends on the order of the additions, but every rank still ends with the same
  // bits. Data parallelism reduces half gradients this way, scaling them before and after to
  // keep the partial sums in range (see parallel/ddp.h).
  virtual void allreduce_half_sum(const Tensor& tensor) = 0;

  // Copies `root`'s tensor into every other rank's tensor, bit for bit (any dtype).
  virtual void broadcast(const Tensor& tensor, int root) = 0;

  // The collectives of sharded training (ZeRO, parallel/zero_shards.h). The tensor is split into
  // parts, one per rank, in rank order: rank r's part is the counts[r] elements after those of
  // the ranks before it (counts: one entry per rank, summing to the tensor's elements; any may
  // be 0). reduce_scatter reduces each part over every rank into its own rank's tensor, as
  // allreduce does (the same widening of half tensors); reduce_scatter_half_sum sums in half
  // precision with allreduce_half_sum's rule (every partial sum rounded to the half type). Each
  // rank's own part ends with the reduction of every rank's values there (over two ranks the
  // same bits as the allreduce, the addition being commutative; beyond two, the backend's order
  // of the partial sums, which may differ from its allreduce's); its other parts are left
  // unspecified. allgather copies each rank's own part of its tensor into every rank's
  // tensor, bit for bit (any dtype).
  virtual void reduce_scatter(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                              ReduceOp op) = 0;
  virtual void reduce_scatter_half_sum(const Tensor& tensor,
                                       const std::vector<std::int64_t>& counts) = 0;
  virtual void allgather(const Tensor& tensor, const std::vector<std::int64_t>& counts) = 0;

  // Every rank's bytes (any length, including none), indexed by rank.
  virtual std::vector<std::string> allgather_bytes(const std::string& bytes) = 0;
  std::vector<std::int64_t> allgather_int64(std::int64_t value);

  // Returns once every rank has entered it.
  virtual void barrier() = 0;

  // The tensor collectives above, queued on `stream` (nullptr: the device's compute stream,
  // cuda::stream_of) for a tensor on a CUDA device: they read the tensor after the work queued
  // on `stream` before the call, and work queued on `stream` after the call sees the result. The
  // host does not wait for the device: NCCL returns once the collective is queued; Gloo stages the
  // tensor through pinned host memory, so the calling thread waits for the download and the host
  // reduction, and the upload is queued. A failure found after the call returned (a dead peer, the
  // timeout) makes every later call throw. For a CPU tensor these are the blocking calls above (the
  // stream is not used). A group that cannot reach device memory throws.
  virtual void allreduce_async(const Tensor& tensor, ReduceOp op, StreamHandle stream);
  virtual void allreduce_half_sum_async(const Tensor& tensor, StreamHandle stream);
  virtual void broadcast_async(const Tensor& tensor, int root, StreamHandle stream);
  virtual void reduce_scatter_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                                    ReduceOp op, StreamHandle stream);
  virtual void reduce_scatter_half_sum_async(const Tensor& tensor,
                                             const std::vector<std::int64_t>& counts,
                                             StreamHandle stream);
  virtual void allgather_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                               StreamHandle stream);
  // Every tensor's broadcast_async, in order, as one group where the backend has groups
  // (NCCL: one ncclGroupStart/End, so that the broadcasts of many small buffers are launched
  // together); here, one after the other.
  virtual void broadcast_group_async(const std::vector<Tensor>& tensors, int root,
                                     StreamHandle stream);
  // For collectives queued on a device stream by something the group did not see queue them
  // (a CUDA graph launch replaying captured collectives): the group's failure detection follows
  // the work queued on `stream` so far, as it follows its own collectives, so that a dead peer
  // fails the group within its timeout. Nothing to follow here (no asynchronous work).
  virtual void follow_stream(const std::string& what, StreamHandle stream);
};

}  // namespace alloy::parallel
