#include "parallel/ddp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace alloy::parallel {

namespace {

using Clock = BucketTiming::Clock;

float half_to_float(DType dtype, std::uint16_t bits) {
  return dtype == DType::bf16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
}

std::uint16_t float_to_half(DType dtype, float value) {
  return dtype == DType::bf16 ? float_to_bf16_bits(value) : float_to_half_bits(value);
}

// Copies `count` half values from `from` to `to`, multiplied by `factor` (1: a plain copy).
void scaled_half_copy(DType dtype, const std::uint16_t* from, std::uint16_t* to, std::size_t count,
                      float factor) {
  if (factor == 1.0f) {
    std::memcpy(to, from, count * sizeof(std::uint16_t));
    return;
  }
  for (std::size_t i = 0; i < count; ++i)
    to[i] = float_to_half(dtype, half_to_float(dtype, from[i]) * factor);
}

}  // namespace

std::vector<Bucket> assign_buckets(const std::vector<GradientSlot>& slots, std::size_t cap_bytes) {
  struct Placed {
    Bucket bucket;
    std::size_t last = 0;  // walk position of its last gradient
  };
  std::vector<Placed> closed;
  std::vector<Placed> open;  // at most one per dtype
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
    if (it->bucket.bytes >= cap_bytes) {
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

DistributedDataParallel::DistributedDataParallel(nn::Module& model, ProcessGroup& group,
                                                 const DdpOptions& options)
    : model_(model),
      group_(group),
      options_(options),
      params_(model.parameters()),
      predivide_(predivide_factor(group.size())) {
  ALLOY_CHECK(options.bucket_bytes > 0, "data parallel: the bucket size must be positive");
  std::vector<GradientSlot> slots;
  for (const nn::Parameter* param : params_) {
    ALLOY_CHECK(param->value.device().is_cpu(), "data parallel: parameter ", param->name, " is on ",
                param->value.device().str(),
                "; reducing GPU gradients needs the NCCL process group, which this build lacks");
    slots.push_back({param->value.dtype(), param->value.numel()});
  }
  buckets_ = assign_buckets(slots, options.bucket_bytes);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    for (const int index : bucket.params)
      bucket_of_[params_[static_cast<std::size_t>(index)]] = b;
    const auto numel = static_cast<std::int64_t>(bucket.bytes / dtype_size(bucket.dtype));
    flat_.push_back(
        Tensor::empty({numel}, bucket.dtype, Device::cpu(), MemoryCategory::communication));
  }
  reset_step();
  thread_ = std::thread([this] { communicate(); });
  model_.set_grad_ready_hook([this](nn::Parameter& param) { on_grad_ready(param); });
}

DistributedDataParallel::~DistributedDataParallel() {
  model_.set_grad_ready_hook(nullptr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
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
  for (const Bucket& bucket : buckets_)
    pending_.push_back(bucket.params.size());
  timings_.assign(buckets_.size(), {});
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    timings_[b].bucket = static_cast<int>(b);
  next_ = 0;
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
    timings_[found->second].ready = Clock::now();
  }
  changed_.notify_all();
}

void DistributedDataParallel::communicate() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock,
                  [&] { return stopping_ || (next_ < buckets_.size() && pending_[next_] == 0); });
    if (stopping_) return;
    const std::size_t bucket = next_;
    timings_[bucket].started = Clock::now();
    lock.unlock();
    std::exception_ptr error;
    try {
      reduce(bucket);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    timings_[bucket].finished = Clock::now();
    if (error) {
      error_ = error;
      next_ = buckets_.size();  // nothing more can be reduced: the group is unusable
    } else {
      ++next_;
    }
    changed_.notify_all();
  }
}

// Runs on the communication thread: gathers the bucket's gradients into its staging buffer,
// reduces it, and scatters the result back.
void DistributedDataParallel::reduce(std::size_t index) {
  const Bucket& bucket = buckets_[index];
  const Tensor& flat = flat_[index];
  const bool half = is_half(bucket.dtype);
  const bool native = half && !options_.allreduce_fp32;
  const float before = native ? 1.0f / predivide_ : 1.0f;
  const float after = native ? predivide_ / static_cast<float>(group_.size()) : 1.0f;
  const std::size_t element = dtype_size(bucket.dtype);
  auto* staging = static_cast<unsigned char*>(flat.raw());
  std::size_t offset = 0;
  for (const int param_index : bucket.params) {
    const nn::Parameter& param = *params_[static_cast<std::size_t>(param_index)];
    const std::size_t count = static_cast<std::size_t>(param.value.numel());
    if (!param.grad.defined()) {
      std::memset(staging + offset, 0, count * element);  // never computed: contributes zero
    } else {
      ALLOY_CHECK(param.grad.dtype() == bucket.dtype && param.grad.device().is_cpu() &&
                      static_cast<std::size_t>(param.grad.numel()) == count,
                  "data parallel: the gradient of ", param.name, " is ",
                  dtype_name(param.grad.dtype()), shape_str(param.grad.shape()), " on ",
                  param.grad.device().str(), ", not the CPU ", dtype_name(bucket.dtype),
                  " tensor it was bucketed as (was the model cast after it was wrapped?)");
      if (half) {
        scaled_half_copy(bucket.dtype, param.grad.half_data(),
                         reinterpret_cast<std::uint16_t*>(staging + offset), count, before);
      } else {
        std::memcpy(staging + offset, param.grad.raw(), count * element);
      }
    }
    offset += count * element;
  }
  if (native) {
    group_.allreduce_half_sum(flat);
  } else {
    group_.allreduce(flat, ReduceOp::average);  // f32, or half widened to f32 and rounded once
  }
  offset = 0;
  for (const int param_index : bucket.params) {
    const nn::Parameter& param = *params_[static_cast<std::size_t>(param_index)];
    const std::size_t count = static_cast<std::size_t>(param.value.numel());
    if (param.grad.defined()) {
      if (half) {
        scaled_half_copy(bucket.dtype, reinterpret_cast<const std::uint16_t*>(staging + offset),
                         param.grad.half_data(), count, after);
      } else {
        std::memcpy(param.grad.raw(), staging + offset, count * element);
      }
    }
    offset += count * element;
  }
}

void DistributedDataParallel::finish() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!sync_) return;
    // Gradients never reported in this backward (parameters it did not reach) are reduced as
    // they are: every rank runs the same model, so every rank forces the same buckets.
    const auto now = Clock::now();
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      if (pending_[b] != 0) {
        pending_[b] = 0;
        timings_[b].ready = now;
      }
    }
    changed_.notify_all();
    // Bounded: each allreduce fails after the group's timeout.
    changed_.wait(lock, [&] { return next_ >= buckets_.size(); });
    const auto done = Clock::now();
    wait_seconds_ += std::chrono::duration<double>(done - now).count();
    if (last_finish_) step_seconds_ += std::chrono::duration<double>(done - *last_finish_).count();
    last_finish_ = done;
    if (error_) std::rethrow_exception(error_);
    last_timings_ = timings_;
    reset_step();
  }
  // Batch-norm statistics were updated from each rank's own shard: take rank 0's, as PyTorch's
  // DDP does before each forward.
  for (const nn::Buffer* buffer : model_.buffers())
    group_.broadcast(buffer->value, 0);
}

std::vector<BucketTiming> DistributedDataParallel::last_timings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_timings_;
}

}  // namespace alloy::parallel
