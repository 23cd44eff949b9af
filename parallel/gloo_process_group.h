// GlooProcessGroup: collectives over CPU tensors on Gloo's TCP transport, and over CUDA tensors
// staged through pinned host memory ("gloo on cuda"): the tensor is copied to the host on a
// stream, the calling thread waits for that copy, Gloo reduces on the host, and the copy back
// is queued on the same stream. Unlike NCCL, this lets several ranks share one device, which is
// how data parallelism is tested on a one-GPU machine.
//
// Rank 0 serves the rendezvous store on the master address; every rank registers there, waits
// for all the others (naming those that never come), and Gloo connects every pair of ranks
// directly. The store stays up while the group lives, so that when a collective fails the ranks
// still alive can learn from it which rank left, and say so.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "parallel/process_group.h"

namespace gloo {
class Context;
}

namespace alloy::parallel {

class TcpStore;
class TcpStoreServer;

class GlooProcessGroup final : public ProcessGroup {
 public:
  // Joins the group of `size` ranks that meet at master_addr:master_port; blocks until every
  // rank has joined. Throws alloy::Error saying which rank could not do what: the master port
  // is busy, the master is unreachable, ranks did not join within the timeout, two processes
  // claim one rank, or ranks disagree on the world size.
  GlooProcessGroup(int rank, int size, const std::string& master_addr, int master_port,
                   const ProcessGroupOptions& options = {});
  ~GlooProcessGroup() override;
  GlooProcessGroup(const GlooProcessGroup&) = delete;
  GlooProcessGroup& operator=(const GlooProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // CPU tensors in place; CUDA tensors through staging on the device's stream.
  void allreduce(const Tensor& tensor, ReduceOp op) override;
  // f16 and bf16 are summed by reduction functions of ours (widen the two operands, add, round
  // to nearest even): Gloo has no bfloat16 type, and its float16 sum drops the smaller operand
  // of some pairs far apart in magnitude.
  void allreduce_half_sum(const Tensor& tensor) override;
  void broadcast(const Tensor& tensor, int root) override;
  // One gloo::reduce per nonempty part, to its rank; allgather is one gloo::allgatherv.
  void reduce_scatter(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                      ReduceOp op) override;
  void reduce_scatter_half_sum(const Tensor& tensor,
                               const std::vector<std::int64_t>& counts) override;
  void allgather(const Tensor& tensor, const std::vector<std::int64_t>& counts) override;
  std::vector<std::string> allgather_bytes(const std::string& bytes) override;
  void barrier() override;

  // CUDA tensors through staging on `stream` (see above); CPU tensors as the blocking calls.
  void allreduce_async(const Tensor& tensor, ReduceOp op, StreamHandle stream) override;
  void allreduce_half_sum_async(const Tensor& tensor, StreamHandle stream) override;
  void broadcast_async(const Tensor& tensor, int root, StreamHandle stream) override;
  void reduce_scatter_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                            ReduceOp op, StreamHandle stream) override;
  void reduce_scatter_half_sum_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                                     StreamHandle stream) override;
  void allgather_async(const Tensor& tensor, const std::vector<std::int64_t>& counts,
                       StreamHandle stream) override;

 private:
  // Parts for the part collectives; null: the whole tensor, on every rank (allreduce).
  using Parts = const std::vector<std::int64_t>*;
  void join();
  void connect_peers();
  void reduce_f32(const std::string& what, float* values, std::size_t count, ReduceOp op,
                  Parts parts);
  // The collectives on host memory.
  void reduce_host(const std::string& what, void* data, DType dtype, std::size_t count, ReduceOp op,
                   Parts parts);
  void half_sum_host(const std::string& what, void* data, DType dtype, std::size_t count,
                     Parts parts);
  void allgather_host(const std::string& what, void* data, std::size_t element_bytes,
                      const std::vector<std::int64_t>& counts);
  // Runs `collective(offset, count, root)` for each nonempty part, or once over everything
  // (root -1) without parts.
  template <class Collective>
  void by_parts(std::size_t count, Parts parts, Collective&& collective);
  void broadcast_host(const std::string& what, void* data, std::size_t bytes, int root);
  // Runs `host` on a pinned copy of the CUDA tensor (downloaded first when `download`), then
  // queues the copy back.
  void staged(const std::string& what, const Tensor& tensor, StreamHandle stream, bool download,
              const std::function<void(void*)>& host);
  template <class Body>
  void run(const std::string& what, Body&& body);
  std::string departures();
  std::string here() const;

  int rank_;
  int size_;
  ProcessGroupOptions options_;
  std::string master_;
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 only
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<gloo::Context> context_;
  struct Staging;  // pinned buffer and events, made at the first CUDA tensor
  std::unique_ptr<Staging> staging_;
  std::string failure_;  // the first failed operation's message; the group is unusable after it
};

}  // namespace alloy::parallel
