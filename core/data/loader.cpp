#include "core/data/loader.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "core/error.h"

namespace alloy::data {

Loader::Loader(const Dataset& dataset, std::vector<std::int64_t> order, std::int64_t batch_size,
               std::int64_t start, std::int64_t epoch, int threads)
    : dataset_(dataset),
      order_(std::move(order)),
      batch_size_(batch_size),
      start_(start),
      epoch_(epoch),
      threads_(std::max(1, threads)),
      pool_(threads_ > 1 && dataset.source ? shared_worker_pool(threads_) : nullptr),
      ahead_(dataset.source ? 2 : 1) {
  if (batch_size < 1) usage_fail("batch size must be at least 1, got ", batch_size);
  const auto size = static_cast<std::int64_t>(order_.size());
  ALLOY_CHECK(start >= 0 && start <= size, "loader: start position ", start,
              " is outside the epoch's ", size, " examples");
  const Tensor& images = dataset_.images;
  const Tensor& labels = dataset_.labels;
  const bool images_fit = dataset_.source ? !images.defined()
                                          : images.defined() && images.dtype() == DType::u8 &&
                                                images.ndim() == 4 && images.device().is_cpu() &&
                                                labels.defined() && images.dim(0) == labels.dim(0);
  ALLOY_CHECK(images_fit && labels.defined() && labels.dtype() == DType::i32 &&
                  labels.ndim() == 1 && labels.device().is_cpu(),
              "loader: dataset ", dataset_.name,
              " needs host u8 images [N, C, H, W] (or an example source) and i32 labels [N], got ",
              images.defined() ? images.str() : "no images", " and ",
              labels.defined() ? labels.str() : "no labels");
  worker_ = std::thread([this] { produce(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

std::int64_t Loader::batches() const {
  const auto remaining = static_cast<std::int64_t>(order_.size()) - start_;
  return (remaining + batch_size_ - 1) / batch_size_;
}

bool Loader::next(Batch& batch) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !ready_.empty() || finished_; });
  if (!ready_.empty()) {
    batch = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    changed_.notify_all();  // the worker may start on the batch after this one
    return true;
  }
  if (error_) std::rethrow_exception(error_);
  return false;
}

Batch Loader::assemble(std::int64_t position) const {
  const auto size = std::min(batch_size_, static_cast<std::int64_t>(order_.size()) - position);
  const std::int64_t examples = dataset_.size();
  const Shape shape = dataset_.example_shape();
  const auto example_bytes = static_cast<std::size_t>(shape[0] * shape[1] * shape[2]);
  Batch batch;
  batch.index = position / batch_size_;
  batch.images = Tensor::empty({size, shape[0], shape[1], shape[2]}, DType::u8, Device::cpu(),
                               MemoryCategory::data);
  batch.labels = Tensor::empty({size}, DType::i32, Device::cpu(), MemoryCategory::data);
  const std::int32_t* source_labels = dataset_.labels.data<std::int32_t>();
  std::uint8_t* pixels = batch.images.data<std::uint8_t>();
  std::int32_t* labels = batch.labels.data<std::int32_t>();
  for (std::int64_t k = 0; k < size; ++k) {
    const std::int64_t example = order_[static_cast<std::size_t>(position + k)];
    if (example < 0 || example >= examples) {
      fail("loader: example index ", example, " at position ", position + k,
           " of the order is outside dataset ", dataset_.name, " of ", examples, " examples");
    }
    labels[k] = source_labels[example];
    if (dataset_.source) continue;
    std::memcpy(
        pixels + static_cast<std::size_t>(k) * example_bytes,
        dataset_.images.data<std::uint8_t>() + static_cast<std::size_t>(example) * example_bytes,
        example_bytes);
  }
  if (dataset_.source) make_examples(position, size, pixels);
  return batch;
}

void Loader::make_examples(std::int64_t position, std::int64_t size, std::uint8_t* pixels) const {
  const Shape shape = dataset_.example_shape();
  const auto example_bytes = static_cast<std::size_t>(shape[0] * shape[1] * shape[2]);
  const auto make = [&](std::int64_t k) {
    dataset_.source->load(order_[static_cast<std::size_t>(position + k)], epoch_,
                          pixels + static_cast<std::size_t>(k) * example_bytes);
  };
  if (!pool_) {
    for (std::int64_t k = 0; k < size; ++k)
      make(k);
    return;
  }
  pool_->run(size, make);  // each example to its own bytes: the order of the threads is moot
}

void Loader::produce() {
  try {
    // Up to the end of the order: the last batch may be smaller (assemble() clips it).
    const auto size = static_cast<std::int64_t>(order_.size());
    for (auto position = start_; position < size; position += batch_size_) {
      {
        // At most ahead_ batches wait for the consumer.
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return ready_.size() < ahead_ || stopping_; });
        if (stopping_) break;
      }
      Batch batch = assemble(position);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(batch));
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  changed_.notify_all();
}

}  // namespace alloy::data
