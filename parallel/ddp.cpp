#include "parallel/ddp.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "parallel/ops/bucket.h"
#include "parallel/zero_shards.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/context.h"
#include "core/cuda/handles.h"
#endif

namespace alloy::parallel {

namespace {

using Clock = BucketTiming::Clock;

}  // namespace

#ifdef ALLOY_HAVE_CUDA
// The CUDA path's ordering: a communication stream, and per bucket an event on the compute
// stream (its last gradient is final) and one on the communication stream (its reduction is
// done); `requested` marks finish() on the compute stream, `buffers_done` the broadcast of
// rank 0's buffers.
struct DistributedDataParallel::DeviceOrder {
  DeviceOrder(int device, std::size_t buckets)
      : communication(device), requested(device), buffers_done(device) {
    for (std::size_t b = 0; b < buckets; ++b) {
      ready.emplace_back(device);
      done.emplace_back(device);
    }
  }
  cuda::Stream communication;
  std::vector<cuda::Event> ready;
  std::vector<cuda::Event> done;
  cuda::Event requested;
  cuda::Event buffers_done;
};
#else
struct DistributedDataParallel::DeviceOrder {};
#endif

std::vector<Bucket> assign_buckets(const std::vector<GradientSlot>& slots, std::size_t cap_bytes,
                                   std::size_t first_cap_bytes) {
  struct Placed {
    Bucket bucket;
    std::size_t last = 0;  // walk position of its last gradient
  };
  std::vector<Placed> closed;
  std::vector<Placed> open;    // at most one per dtype
  std::vector<DType> started;  // the dtypes whose first bucket has closed
  std::size_t position = 0;
  for (int index = static_cast<int>(slots.size()) - 1; index >= 0; --index, ++position) {
    const GradientSlot& slot = slots[static_cast<std::size_t>(index)];
    ALLOY_CHECK(slot.numel >= 0, "assign_buckets: parameter ", index, " has ", slot.numel,
                " elements");
    auto it = std::find_if(open.begin(), open.end(),
                           [&](const Placed& placed) { return placed.bucket.dtype == slot.dtype; });
    if (it == open.end()) {
      open.push_back({});
      it = open.end() - 1;
      it->bucket.dtype = slot.dtype;
    }
    it->bucket.params.push_back(index);
    it->bucket.bytes += static_cast<std::size_t>(slot.numel) * dtype_size(slot.dtype);
    it->last = position;
    const bool first = std::find(started.begin(), started.end(), slot.dtype) == started.end();
    if (it->bucket.bytes >= (first ? std::min(first_cap_bytes, cap_bytes) : cap_bytes)) {
      if (first) started.push_back(slot.dtype);
      closed.push_back(std::move(*it));
      open.erase(it);
    }
  }
  closed.insert(closed.end(), open.begin(), open.end());
  std::stable_sort(closed.begin(), closed.end(),
                   [](const Placed& a, const Placed& b) { return a.last < b.last; });
  std::vector<Bucket> buckets;
  for (Placed& placed : closed)
    buckets.push_back(std::move(placed.bucket));
  return buckets;
}

float predivide_factor(int world) {
  ALLOY_CHECK(world >= 1, "predivide_factor: world size ", world);
  return std::ldexp(1.0f, static_cast<int>(std::round(std::log2(static_cast<double>(world)) / 2)));
}

float postdivide_factor(int world) {
  return predivide_factor(world) / static_cast<float>(world);
}

BucketLayout layout_bucket(const Bucket& bucket, const std::vector<GradientSlot>& slots) {
  BucketLayout layout;
  for (const int index : bucket.params) {
    ALLOY_CHECK(index >= 0 && static_cast<std::size_t>(index) < slots.size(),
                "layout_bucket: parameter ", index, " of ", slots.size());
    const GradientSlot& slot = slots[static_cast<std::size_t>(index)];
    ALLOY_CHECK(slot.dtype == bucket.dtype, "layout_bucket: parameter ", index, " is ",
                dtype_name(slot.dtype), " in a ", dtype_name(bucket.dtype), " bucket");
    layout.offsets.push_back(layout.numel);
    layout.numel += slot.numel;
  }
  return layout;
}

BucketPlan plan_buckets(const std::vector<GradientSlot>& slots, std::size_t cap_bytes,
                        std::size_t first_cap_bytes) {
  BucketPlan plan;
  plan.buckets = assign_buckets(slots, cap_bytes, first_cap_bytes);
  for (const Bucket& bucket : plan.buckets)
    plan.layouts.push_back(layout_bucket(bucket, slots));
  return plan;
}

std::vector<GradientSlot> gradient_slots(const std::vector<nn::Parameter*>& params) {
  std::vector<GradientSlot> slots;
  slots.reserve(params.size());
  for (const nn::Parameter* param : params)
    slots.push_back({param->value.dtype(), param->value.numel()});
  return slots;
}

DistributedDataParallel::DistributedDataParallel(nn::Module& model, ProcessGroup& group,
                                                 const DdpOptions& options)
    : model_(model),
      group_(group),
      options_(options),
      params_(model.parameters()),
      predivide_(predivide_factor(group.size())) {
  ALLOY_CHECK(options.bucket_bytes > 0 && options.first_bucket_bytes > 0,
              "data parallel: the bucket sizes must be positive");
  if (!params_.empty()) device_ = params_.front()->value.device();
  for (const nn::Parameter* param : params_) {
    ALLOY_CHECK(param->value.device() == device_, "data parallel: parameter ", param->name,
                " is on ", param->value.device().str(), ", parameter ", params_.front()->name,
                " on ", device_.str(), "; one replica lives on one device");
  }
  const std::vector<GradientSlot> slots = gradient_slots(params_);
  plan_ = plan_buckets(slots, options.bucket_bytes, options.first_bucket_bytes);
  if (options.reduce_to_owners) plan_owners(slots);
  for (std::size_t b = 0; b < plan_.buckets.size(); ++b) {
    const Bucket& bucket = plan_.buckets[b];
    for (const int index : bucket.params)
      bucket_of_[params_[static_cast<std::size_t>(index)]] = b;
    // Half gradients reduced in fp32 are widened into an f32 bucket, and rounded once on the
    // way out.
    const DType dtype = is_half(bucket.dtype) && options.allreduce_fp32 ? DType::f32 : bucket.dtype;
    flat_.push_back(
        Tensor::empty({plan_.layouts[b].numel}, dtype, device_, MemoryCategory::communication));
  }
  if (device_.is_cuda()) {
#ifdef ALLOY_HAVE_CUDA
    order_ = std::make_unique<DeviceOrder>(device_.index, plan_.buckets.size());
#else
    fail("data parallel on ", device_.str(), ": this build of Alloy has no CUDA backend");
#endif
  }
  reset_step();
  thread_ = std::thread([this] { communicate(); });
  model_.set_grad_ready_hook([this](nn::Parameter& param) { on_grad_ready(param); });
}

// Packs each bucket in flat (registration) order and finds each rank's stretch of it.
void DistributedDataParallel::plan_owners(const std::vector<GradientSlot>& slots) {
  std::vector<std::int64_t> sizes;
  for (const GradientSlot& slot : slots)
    sizes.push_back(slot.numel);
  const std::vector<std::int64_t> starts = flat_offsets(sizes);
  const std::int64_t total = starts.back();
  const ShardRange mine = shard_range(total, group_.size(), group_.rank());
  for (std::size_t b = 0; b < plan_.buckets.size(); ++b) {
    Bucket& bucket = plan_.buckets[b];
    std::sort(bucket.params.begin(), bucket.params.end());
    plan_.layouts[b] = layout_bucket(bucket, slots);
    std::vector<std::int64_t> counts(static_cast<std::size_t>(group_.size()), 0);
    std::vector<OwnedPiece> owned;
    for (std::size_t i = 0; i < bucket.params.size(); ++i) {
      const auto index = static_cast<std::size_t>(bucket.params[i]);
      const std::int64_t begin = starts[index], end = starts[index + 1];
      const std::vector<std::int64_t> parts = owned_counts(total, group_.size(), begin, end);
      for (std::size_t r = 0; r < parts.size(); ++r)
        counts[r] += parts[r];
      const std::int64_t first = std::max(begin, mine.begin), last = std::min(end, mine.end);
      if (first < last) {
        owned.push_back(
            {i, first - begin, last - first, plan_.layouts[b].offsets[i] + first - begin});
      }
    }
    owner_counts_.push_back(std::move(counts));
    owned_.push_back(std::move(owned));
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  model_.set_grad_ready_hook(nullptr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
#ifdef ALLOY_HAVE_CUDA
  // Queued copies may still read or write the buckets, which go back to the allocator next. A
  // failure here cannot be reported from a destructor; the stream is done either way.
  if (order_) static_cast<void>(cudaStreamSynchronize(order_->communication.get()));
#endif
}

void DistributedDataParallel::broadcast_from_rank0(const std::vector<nn::Parameter*>& extra) {
  for (const nn::Parameter* param : params_)
    group_.broadcast(param->value, 0);
  for (const nn::Buffer* buffer : model_.buffers())
    group_.broadcast(buffer->value, 0);
  for (const nn::Parameter* param : extra)
    group_.broadcast(param->value, 0);
}

void DistributedDataParallel::set_sync(bool sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  sync_ = sync;
}

void DistributedDataParallel::reset_step() {
  pending_.clear();
  for (const Bucket& bucket : plan_.buckets)
    pending_.push_back(bucket.params.size());
  timings_.assign(plan_.buckets.size(), {});
  for (std::size_t b = 0; b < plan_.buckets.size(); ++b)
    timings_[b].bucket = static_cast<int>(b);
  next_ = 0;
  buffers_wanted_ = false;
}

void DistributedDataParallel::on_grad_ready(nn::Parameter& param) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!sync_) return;
    const auto found = bucket_of_.find(&param);
    if (found == bucket_of_.end()) return;  // not a parameter this object reduces
    std::size_t& pending = pending_[found->second];
    if (pending == 0) return;
    if (--pending != 0) return;
#ifdef ALLOY_HAVE_CUDA
    // The gradient's kernels are queued on the compute stream: the bucket is ready after them.
    if (order_) order_->ready[found->second].record(cuda::stream_of(device_));
#endif
    timings_[found->second].ready = Clock::now();
  }
  changed_.notify_all();
}

void DistributedDataParallel::communicate() {
  const std::size_t buckets = plan_.buckets.size();
  std::unique_lock<std::mutex> lock(mutex_);
#ifdef ALLOY_HAVE_CUDA
  // Once for this thread, never switched back: a guard restoring the default device would
  // create a context on cuda:0 for a rank on another device.
  if (order_) {
    const cudaError_t status = cudaSetDevice(device_.index);
    if (status != cudaSuccess) {
      error_ = std::make_exception_ptr(
          Error(detail::concat("data parallel: cannot select ", device_.str(),
                               " for the communication thread: ", cuda::status_text(status))));
      next_ = buckets + 1;
    }
  }
#endif
  while (true) {
    changed_.wait(lock, [&] {
      return stopping_ || (next_ < buckets && pending_[next_] == 0) ||
             (next_ == buckets && buffers_wanted_);
    });
    if (stopping_) return;
    const std::size_t job = next_;
    if (job < buckets) timings_[job].started = Clock::now();
    lock.unlock();
    std::exception_ptr error;
    try {
      if (job < buckets) {
        reduce(job);
      } else {
        broadcast_buffers();
      }
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (job < buckets) timings_[job].finished = Clock::now();
    if (error) {
      error_ = error;
      next_ = buckets + 1;  // nothing more can be reduced: the group is unusable
    } else {
      ++next_;
    }
    changed_.notify_all();
  }
}

// Runs on the communication thread: gathers the bucket's gradients into its flat buffer,
// reduces it, and scatters the result back. On a device all of it is queued on the
// communication stream after the bucket's ready event.
void DistributedDataParallel::reduce(std::size_t index) {
  const Bucket& bucket = plan_.buckets[index];
  const BucketLayout& layout = plan_.layouts[index];
  const Tensor& flat = flat_[index];
  const bool native = is_half(bucket.dtype) && !options_.allreduce_fp32;
  const float before = native ? 1.0f / predivide_ : 1.0f;
  const float after = native ? postdivide_factor(group_.size()) : 1.0f;
  std::vector<BucketSlice> slices;
  slices.reserve(bucket.params.size());
  for (std::size_t i = 0; i < bucket.params.size(); ++i) {
    const nn::Parameter& param = *params_[static_cast<std::size_t>(bucket.params[i])];
    // Never computed: contributes zero, and nothing is written back.
    if (param.grad.defined()) {
      ALLOY_CHECK(param.grad.dtype() == bucket.dtype && param.grad.device() == device_ &&
                      param.grad.numel() == param.value.numel(),
                  "data parallel: the gradient of ", param.name, " is ", param.grad.str(),
                  ", not the ", dtype_name(bucket.dtype), " tensor on ", device_.str(),
                  " it was bucketed as (was the model cast after it was wrapped?)");
    }
    slices.push_back({param.grad, layout.offsets[i], param.value.numel()});
  }
  StreamHandle stream = nullptr;
#ifdef ALLOY_HAVE_CUDA
  if (order_) {
    stream = order_->communication.get();
    order_->ready[index].wait(stream);
  }
#endif
  copy_into_bucket(slices, flat, before, stream);
  if (options_.reduce_to_owners) {
    const std::vector<std::int64_t>& counts = owner_counts_[index];
    if (native) {
      group_.reduce_scatter_half_sum_async(flat, counts, stream);
    } else {
      group_.reduce_scatter_async(flat, counts, ReduceOp::average, stream);
    }
    // Only this rank's stretch holds the reduction: only it goes back.
    std::vector<BucketSlice> owned;
    for (const OwnedPiece& piece : owned_[index]) {
      const Tensor& grad = slices[piece.member].grad;
      if (!grad.defined()) continue;
      owned.push_back({grad.view(static_cast<std::size_t>(piece.first) * dtype_size(grad.dtype()),
                                 {piece.count}, grad.dtype()),
                       piece.offset, piece.count});
    }
    copy_from_bucket(flat, owned, after, stream);
  } else {
    if (native) {
      group_.allreduce_half_sum_async(flat, stream);
    } else {
      group_.allreduce_async(flat, ReduceOp::average, stream);  // f32, or half widened into f32
    }
    copy_from_bucket(flat, slices, after, stream);
  }
#ifdef ALLOY_HAVE_CUDA
  if (order_) order_->done[index].record(stream);
#endif
}

// Runs on the communication thread, after every bucket: batch-norm statistics were updated
// from each rank's own shard, so every rank takes rank 0's, as PyTorch's DDP does before each
// forward.
void DistributedDataParallel::broadcast_buffers() {
  StreamHandle stream = nullptr;
#ifdef ALLOY_HAVE_CUDA
  if (order_) {
    stream = order_->communication.get();
    order_->requested.wait(stream);  // after the forward that updated them
  }
#endif
  std::vector<Tensor> buffers;
  for (const nn::Buffer* buffer : model_.buffers())
    buffers.push_back(buffer->value);
  group_.broadcast_group_async(buffers, 0, stream);
#ifdef ALLOY_HAVE_CUDA
  if (order_) order_->buffers_done.record(stream);
#endif
}

void DistributedDataParallel::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!sync_) return;
  const std::size_t buckets = plan_.buckets.size();
  // Gradients never reported in this backward (parameters it did not reach) are reduced as
  // they are: every rank runs the same model, so every rank forces the same buckets.
  const auto now = Clock::now();
#ifdef ALLOY_HAVE_CUDA
  if (order_) order_->requested.record(cuda::stream_of(device_));
#endif
  for (std::size_t b = 0; b < buckets; ++b) {
    if (pending_[b] != 0) {
      pending_[b] = 0;
#ifdef ALLOY_HAVE_CUDA
      if (order_) order_->ready[b].record(cuda::stream_of(device_));
#endif
      timings_[b].ready = now;
    }
  }
  buffers_wanted_ = true;
  changed_.notify_all();
  // Bounded: each collective fails after the group's timeout.
  changed_.wait(lock, [&] { return next_ > buckets; });
  const auto done = Clock::now();
  wait_seconds_ += std::chrono::duration<double>(done - now).count();
  if (last_finish_) step_seconds_ += std::chrono::duration<double>(done - *last_finish_).count();
  last_finish_ = done;
  if (error_) std::rethrow_exception(error_);
#ifdef ALLOY_HAVE_CUDA
  if (order_) {
    // The optimizer's kernels, queued next on the compute stream, run after the reduction.
    const cudaStream_t compute = cuda::stream_of(device_);
    for (const cuda::Event& event : order_->done)
      event.wait(compute);
    order_->buffers_done.wait(compute);
  }
#endif
  last_timings_ = timings_;
  reset_step();
}

void DistributedDataParallel::follow_replay() {
  group_.follow_stream(detail::concat("the collectives of a replayed step (", plan_.buckets.size(),
                                      " gradient bucket(s), then the buffers)"),
                       nullptr);
}

std::vector<BucketTiming> DistributedDataParallel::last_timings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_timings_;
}

}  // namespace alloy::parallel
