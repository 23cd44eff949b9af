#include "core/data/loader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace alloy::data {

Loader::Loader(const Dataset& dataset, std::vector<std::int64_t> order, std::int64_t batch_size,
               std::int64_t start)
    : dataset_(dataset), order_(std::move(order)), batch_size_(batch_size), start_(start) {
  if (batch_size < 1) usage_fail("batch size must be at least 1, got ", batch_size);
  const auto size = static_cast<std::int64_t>(order_.size());
  ALLOY_CHECK(start >= 0 && start <= size, "loader: start position ", start,
              " is outside the epoch's ", size, " examples");
  const Tensor& images = dataset_.images;
  const Tensor& labels = dataset_.labels;
  ALLOY_CHECK(images.defined() && labels.defined() && images.dtype() == DType::u8 &&
                  images.ndim() == 4 && labels.dtype() == DType::i32 && labels.ndim() == 1 &&
                  images.dim(0) == labels.dim(0) && images.device().is_cpu() &&
                  labels.device().is_cpu(),
              "loader: dataset ", dataset_.name,
              " needs host u8 images [N, C, H, W] and i32 labels [N], got ",
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
  changed_.wait(lock, [this] { return ready_.has_value() || finished_; });
  if (ready_) {
    batch = std::move(*ready_);
    ready_.reset();
    lock.unlock();
    changed_.notify_all();  // the worker may start on the batch after this one
    return true;
  }
  if (error_) std::rethrow_exception(error_);
  return false;
}

Batch Loader::assemble(std::int64_t position) const {
  const auto size = std::min(batch_size_, static_cast<std::int64_t>(order_.size()) - position);
  const Tensor& images = dataset_.images;
  const std::int64_t examples = images.dim(0);
  const auto example_bytes =
      static_cast<std::size_t>(images.dim(1) * images.dim(2) * images.dim(3));
  Batch batch;
  batch.index = position / batch_size_;
  batch.images = Tensor::empty({size, images.dim(1), images.dim(2), images.dim(3)}, DType::u8,
                               Device::cpu(), MemoryCategory::data);
  batch.labels = Tensor::empty({size}, DType::i32, Device::cpu(), MemoryCategory::data);
  const std::uint8_t* source_pixels = images.data<std::uint8_t>();
  const std::int32_t* source_labels = dataset_.labels.data<std::int32_t>();
  std::uint8_t* pixels = batch.images.data<std::uint8_t>();
  std::int32_t* labels = batch.labels.data<std::int32_t>();
  for (std::int64_t k = 0; k < size; ++k) {
    const std::int64_t example = order_[static_cast<std::size_t>(position + k)];
    if (example < 0 || example >= examples) {
      fail("loader: example index ", example, " at position ", position + k,
           " of the order is outside dataset ", dataset_.name, " of ", examples, " examples");
    }
    std::memcpy(pixels + static_cast<std::size_t>(k) * example_bytes,
                source_pixels + static_cast<std::size_t>(example) * example_bytes, example_bytes);
    labels[k] = source_labels[example];
  }
  return batch;
}

void Loader::produce() {
  try {
    // Up to the end of the order: the last batch may be smaller (assemble() clips it).
    const auto size = static_cast<std::int64_t>(order_.size());
    for (auto position = start_; position < size; position += batch_size_) {
      {
        // Assemble only once the previous batch was taken: exactly one batch ahead.
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return !ready_.has_value() || stopping_; });
        if (stopping_) break;
      }
      Batch batch = assemble(position);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_ = std::move(batch);
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
