// DistributedDataParallel: keeps the replicas of a model identical across the ranks of a
// process group, the way PyTorch's DDP and Apex's do.
//
//  - At start, rank 0's parameters and buffers are copied to every rank (broadcast).
//  - Gradients are grouped into buckets of about 25 MB (--bucket-cap-mb), one dtype per bucket,
//    filled in reverse registration order: the order backward finalises them. The first
//    bucket of each dtype is capped at 1 MB, as in PyTorch, so that the first reduction
//    starts early in backward instead of when most gradients are final. The model's grad-ready
//    hook tells us when each gradient is final; as soon as a bucket's last gradient is, its
//    allreduce starts on a communication thread (a side stream on a GPU), while backward goes
//    on with the layers below. Buckets are reduced in bucket order on every rank, so every
//    rank issues the same collectives in the same order.
//  - Half gradients are summed in half precision (half the traffic), scaled by 1/p before the
//    sum and by p/world after it, p = predivide_factor(world), so that the partial sums stay
//    in range where a plain sum of world gradients could overflow fp16; with allreduce_fp32
//    they are widened, summed and averaged in fp32 and rounded once. fp32 gradients are
//    averaged in fp32.
//  - finish() waits for every bucket, rethrows a failed allreduce (naming the lost rank), and
//    copies rank 0's buffers (batch-norm statistics) to the others, all of them in one
//    group of broadcasts (ncclGroupStart/End with NCCL). After it every rank holds
//    the same averaged gradients, so every rank takes the same step, and the same skip decision
//    on overflow.
//  - One bucket plan (membership and layout) for every backend. On the CPU the buckets are host
//    buffers and the communication thread runs the copies and a blocking collective. On a CUDA
//    device they are device buffers, and the order is kept by events, never by the host: when a
//    bucket's last gradient is final, an event is recorded on the compute stream; the
//    communication thread makes a communication stream wait on it and queues the copy-in (with
//    the predivide), the collective and the copy-out (with the postdivide) there, then records
//    the bucket's done event. finish() waits on the host only until every bucket's work is
//    queued, then makes the compute stream wait on the done events, so the optimizer's kernels
//    run after the reduction with no host synchronisation. With NCCL the collective is queued
//    without a host wait; with Gloo the communication thread stages the bucket through pinned
//    host memory (its own wait, never the training thread's).
//  - Under a CUDA graph capture of the step (apps/train/step_graph.h) the same calls capture the
//    same work: the communication stream joins the capture through the ready events, the
//    collectives become nodes of the graph, and finish()'s waits on the done events join it
//    back, so one launch replays backward, the reductions and the broadcasts in their order.
//    follow_replay() then has the group watch each launch.
//  - With reduce_to_owners (ZeRO stage 1, parallel/zero_shards.h), each bucket's buffer is
//    packed in registration order, which is the flat parameter space's order, so the elements
//    that each rank's shard owns form one stretch of it, and the bucket is reduced to those
//    owners (reduce_scatter, with the same scalings) instead of all-reduced: each rank receives
//    the averaged gradient of its own shard, and only that part is copied back into its
//    gradients (the rest of them keep this rank's own values, which no sharded step reads).
//  - no_sync(): backwards inside it only accumulate gradients locally (gradient accumulation);
//    the first backward after it reduces what has accumulated.
//
// The process group serves one thread at a time: between a backward's first gradient and
// finish() the communication thread owns it, and the caller must not use the group.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/nn/module.h"
#include "parallel/process_group.h"

namespace alloy::parallel {

inline constexpr std::size_t kDefaultBucketBytes = 25u * 1024u * 1024u;
inline constexpr std::size_t kDefaultFirstBucketBytes = 1024u * 1024u;

// One parameter's gradient, as bucketing sees it.
struct GradientSlot {
  DType dtype = DType::f32;
  std::int64_t numel = 0;
};

struct Bucket {
  DType dtype = DType::f32;
  // Indices into the registration-order parameter list, in the order their gradients become
  // final (reverse registration order).
  std::vector<int> params;
  std::size_t bytes = 0;
};

// Groups gradients into buckets: walking the parameters in reverse registration order, each
// one joins the open bucket of its dtype, and a bucket closes once it holds `cap_bytes` or
// more (a parameter larger than the cap gets a bucket of its own); the first bucket of each
// dtype closes at min(first_cap_bytes, cap_bytes) already. The buckets come in the
// order they become ready during backward: by the position of their last gradient in the walk.
// A pure function of the slots and the cap, so every rank computes the same buckets.
std::vector<Bucket> assign_buckets(const std::vector<GradientSlot>& slots, std::size_t cap_bytes,
                                   std::size_t first_cap_bytes = SIZE_MAX);

// The factor half gradients are divided by before the sum (and the sum by world / factor
// after it): the power of two nearest sqrt(world), so that both scalings are exact in binary
// floating point (barring underflow) and neither the addends nor the sum grow past
// sqrt(world) times a gradient. 1 for world 1, 2 for worlds 2 to 7, 4 for 8 to 31, ...
float predivide_factor(int world);
// The factor the half sum is multiplied by after the collective: predivide_factor(world) / world.
// 1/p is a power of two, so (1/p) * (p/world) is exactly float(1/world): the two scalings
// together average, with no extra rounding of the factors.
float postdivide_factor(int world);

// Where each member of a bucket sits in its flat buffer: element offsets, in Bucket::params
// order, packed back to back, and the buffer's length in elements. The same on every backend
// and every rank.
struct BucketLayout {
  std::vector<std::int64_t> offsets;
  std::int64_t numel = 0;
};
BucketLayout layout_bucket(const Bucket& bucket, const std::vector<GradientSlot>& slots);

// The buckets and their layouts: what both the CPU and the CUDA paths copy by.
struct BucketPlan {
  std::vector<Bucket> buckets;
  std::vector<BucketLayout> layouts;  // one per bucket
};
BucketPlan plan_buckets(const std::vector<GradientSlot>& slots, std::size_t cap_bytes,
                        std::size_t first_cap_bytes = SIZE_MAX);

// The slots of parameters: dtype and size, not where they live, so a model plans the same
// buckets on the CPU and on a device.
std::vector<GradientSlot> gradient_slots(const std::vector<nn::Parameter*>& params);

struct DdpOptions {
  std::size_t bucket_bytes = kDefaultBucketBytes;
  std::size_t first_bucket_bytes = kDefaultFirstBucketBytes;  // capped at bucket_bytes
  bool allreduce_fp32 = false;                                // reduce half gradients in fp32
  // Reduce each gradient element to the rank whose shard owns it (see above) instead of to
  // every rank.
  bool reduce_to_owners = false;
};

// When one bucket's allreduce was asked for, began and ended, for traces and the overlap test.
struct BucketTiming {
  using Clock = std::chrono::steady_clock;
  int bucket = 0;
  Clock::time_point ready;     // its last gradient became final
  Clock::time_point started;   // the communication thread began to reduce it
  Clock::time_point finished;  // the reduced gradients were back in place
};

class DistributedDataParallel {
 public:
  // Installs the grad-ready hook on `model` and starts the communication thread. `model` and
  // `group` must outlive this object. Takes the buckets of the model's parameters as they
  // are now (call it after the amp layer cast the model). The parameters share one device; on
  // a CUDA device the group must reach device memory (NCCL, or Gloo through pinned staging).
  DistributedDataParallel(nn::Module& model, ProcessGroup& group, const DdpOptions& options = {});
  // Removes the hook and stops the communication thread (waiting for a running allreduce).
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // Copies rank 0's model parameters and buffers, and `extra` tensors (fp32 master weights),
  // to every rank.
  void broadcast_from_rank0(const std::vector<nn::Parameter*>& extra = {});

  // Waits for every bucket of this backward (reducing those whose gradients were never
  // reported), then copies rank 0's buffers to every rank. Rethrows the communication thread's
  // failure. Does nothing inside no_sync(). On a device it returns once that work is queued,
  // with the compute stream ordered after it.
  void finish();

  // While the returned guard lives, backward passes do not reduce (gradient accumulation).
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp) { ddp_.set_sync(false); }
    ~NoSync() { ddp_.set_sync(true); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // After a launch of a CUDA graph that captured a step (its backward and finish()): the
  // group's watchdog follows the launch's collectives, which no host code queued this time.
  void follow_replay();

  const std::vector<Bucket>& buckets() const { return plan_.buckets; }
  const BucketPlan& plan() const { return plan_; }
  // The flat buffer of each bucket: the bucket's dtype, or f32 for half gradients reduced in
  // fp32; on the parameters' device, in communication memory.
  const std::vector<Tensor>& bucket_buffers() const { return flat_; }
  // The timings of the last finished backward's buckets, in bucket order.
  std::vector<BucketTiming> last_timings() const;
  int world_size() const { return group_.size(); }
  // Seconds finish() spent waiting for allreduces (on a device: for them to be queued), and seconds
  // from one finish() to the next (steps), since construction: their ratio is the share of step
  // time lost to communication.
  double wait_seconds() const { return wait_seconds_; }
  double step_seconds() const { return step_seconds_; }

 private:
  void set_sync(bool sync);
  void plan_owners(const std::vector<GradientSlot>& slots);
  void on_grad_ready(nn::Parameter& param);
  void communicate();
  void reduce(std::size_t index);
  void broadcast_buffers();
  void reset_step();

  nn::Module& model_;
  ProcessGroup& group_;
  DdpOptions options_;
  std::vector<nn::Parameter*> params_;  // registration order
  std::unordered_map<const nn::Parameter*, std::size_t> bucket_of_;
  BucketPlan plan_;
  Device device_ = Device::cpu();  // where the parameters live
  std::vector<Tensor> flat_;       // one flat buffer per bucket (communication memory)
  // With reduce_to_owners, per bucket: its elements owned by each rank, and this rank's part as
  // (member index in the bucket, first element in the parameter, count, offset in the bucket).
  struct OwnedPiece {
    std::size_t member = 0;
    std::int64_t first = 0, count = 0, offset = 0;
  };
  std::vector<std::vector<std::int64_t>> owner_counts_;
  std::vector<std::vector<OwnedPiece>> owned_;
  struct DeviceOrder;  // streams and events of the CUDA path
  std::unique_ptr<DeviceOrder> order_;
  float predivide_ = 1;
  bool sync_ = true;
  double wait_seconds_ = 0;
  double step_seconds_ = 0;
  std::optional<BucketTiming::Clock::time_point> last_finish_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::size_t> pending_;  // per bucket: gradients not yet final in this backward
  std::vector<BucketTiming> timings_;
  std::vector<BucketTiming> last_timings_;
  // The next job of the communication thread: bucket next_, or, at buckets().size(), rank 0's
  // buffers once finish() asked for them; past that, this backward's work is done.
  std::size_t next_ = 0;
  bool buffers_wanted_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after everything it reads
};

}  // namespace alloy::parallel
