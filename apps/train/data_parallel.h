// The data-parallel side of training.
//
// Where this process stands: a launcher of local workers (--gpus G > 1), one rank of a job
// (a worker, --nodes N with --nr, or the torchrun/mpirun/srun environment), or a single
// process. A launcher (the command's, apps/cli/launcher.h) starts the workers and waits; a rank
// joins the process group and wraps its Trainer in a DataParallel, which the trainer consults at
// its seams: the per-rank batch and shard, the gradient reduction after backward, and the sums
// behind reduced figures.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amp/mixed_precision.h"
#include "apps/train/device_choice.h"
#include "apps/train/train_config.h"
#include "apps/train/zero.h"
#include "core/data/sampler.h"
#include "core/nn/module.h"
#include "parallel/ddp.h"
#include "parallel/process_group.h"
#include "parallel/rendezvous.h"

namespace alloy::app {

// Where this process stands, from the flags of `options` and this process's environment.
// Usage errors name the flag or variable.
parallel::Rendezvous resolve_train_rendezvous(const TrainConfig& options);

// Whether this process trains as a rank of a process group: a world of several ranks, or a
// world of one with --dist-backend given (DDP at world size 1, bit for bit the single process).
bool joins_process_group(const TrainConfig& options, const parallel::Rendezvous& placement);

// Checks what a distributed run needs before any process starts, from the flags alone, each a
// UsageError saying why: the global batch divides evenly among the ranks, and NCCL is not asked
// to put several ranks of this node on one named device (--device cuda:N with --gpus 2).
void check_distributed_options(const TrainConfig& options, const parallel::Rendezvous& placement);

// The collective backend of a rank on `device`: --dist-backend, else nccl on a CUDA device and
// gloo on the CPU. Throws Error for nccl on the CPU that --device auto fell back to.
std::string dist_backend(const TrainConfig& options, const DeviceChoice& device);

// Joins the job's process group: `backend` gloo (CPU tensors, or CUDA buckets staged through
// pinned host memory) or nccl (CUDA tensors on `device`; only in a build with the CUDA
// backend). Its operations (and the wait for every rank to join) time out after
// kCollectiveTimeout, so a stalled peer is reported within a minute; the environment variable
// ALLOY_COLLECTIVE_TIMEOUT (seconds) overrides it.
inline constexpr std::chrono::seconds kCollectiveTimeout{45};
std::unique_ptr<parallel::ProcessGroup> join_process_group(const parallel::Rendezvous& placement,
                                                           const Device& device,
                                                           const std::string& backend);

// The gradient reduction the flags ask for: --bucket-cap-mb, --allreduce-fp32, and --zero 1's
// reduction to the owners of the shards.
parallel::DdpOptions ddp_options(const TrainConfig& options);

// One replica of a data-parallel job. Built by Trainer::join_data_parallel: takes rank 0's
// weights (model parameters, buffers and fp32 masters) and reduces gradients after backward.
// With DdpOptions::reduce_to_owners (--zero 1) it then keeps only this rank's shard of the
// masters and the optimizer's state, and takes over the amp step (apps/train/zero.h).
class DataParallel {
 public:
  DataParallel(parallel::ProcessGroup& group, nn::Module& model, amp::MixedPrecision& precision,
               const parallel::DdpOptions& options);

  int rank() const { return group_.rank(); }
  int world_size() const { return group_.size(); }

  // --batch-size is the global batch; each rank takes its share (UsageError if uneven).
  std::int64_t local_batch_size(std::int64_t global_batch) const;
  // This rank's shard of the seeded per-epoch permutation.
  data::Sampler training_sampler(std::int64_t dataset_size, std::uint64_t seed) const;
  // The test examples this rank evaluates; with sum() of the correct counts, the exact
  // accuracy over the whole test set.
  std::vector<std::int64_t> evaluation_order(std::int64_t dataset_size) const;

  // After backward: waits for the gradient buckets (averaged over the ranks) and takes rank
  // 0's buffers.
  void after_backward() { ddp_.finish(); }

  // The sum over ranks, the same bits on every rank (added in rank order, in double).
  std::int64_t sum(std::int64_t value);
  double sum(double value);
  // Every rank's string, by rank.
  std::vector<std::string> gather(const std::string& text);

  parallel::DistributedDataParallel& ddp() { return ddp_; }
  // The rank's shard under --zero 1, else null.
  ZeroShard* zero() { return zero_.get(); }

 private:
  parallel::ProcessGroup& group_;
  parallel::DistributedDataParallel ddp_;
  std::unique_ptr<ZeroShard> zero_;
};

}  // namespace alloy::app
