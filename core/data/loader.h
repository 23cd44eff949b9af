// Batches of (u8 images, i32 labels) in a given order, assembled on a background thread one
// batch ahead of the consumer.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/data/dataset.h"

namespace alloy::data {

struct Batch {
  Tensor images;  // u8 [B, 1, H, W]
  Tensor labels;  // i32 [B]
  std::int64_t index = 0;  // batch number within the epoch
};

class Loader {
 public:
  // Visits `order` from position `start` (a resumed epoch starts past its first examples) in
  // batches of `batch_size`; the last batch may be smaller.
  Loader(const Dataset& dataset, std::vector<std::int64_t> order, std::int64_t batch_size,
         std::int64_t start = 0);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch, or false at the end of the order. Rethrows a failure of the worker.
  bool next(Batch& batch);
  std::int64_t batches() const;  // number of batches this loader yields in total

 private:
  void produce();

  const Dataset& dataset_;
  std::vector<std::int64_t> order_;
  std::int64_t batch_size_;
  std::int64_t start_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Batch> ready_;  // at most one batch waits here
  std::int64_t produced_ = 0;
  bool finished_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace alloy::data
