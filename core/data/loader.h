// Batches of (u8 images, i32 labels) in a given order, assembled on a background thread one
// batch ahead of the consumer.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/data/dataset.h"

namespace alloy::data {

struct Batch {
  Tensor images;  // u8 [B, 1, H, W], category data
  Tensor labels;  // i32 [B], category data
  // Batch number within the epoch, counted from the epoch's first example:
  // start / batch_size for the first batch a loader yields, then one more each.
  std::int64_t index = 0;
};

class Loader {
 public:
  // Visits `order` from position `start` (a resumed epoch starts past its first examples) in
  // batches of `batch_size`; the last batch may be smaller. The loader keeps its own handle
  // on the dataset's tensors. A batch size below 1 is a UsageError; an index outside the
  // dataset surfaces from next() when its batch is reached. A dataset with an ExampleSource
  // has its examples made for `epoch` by `threads` threads, each taking a contiguous share of
  // the batch; a failure there (a bad image file) surfaces from next() too.
  Loader(const Dataset& dataset, std::vector<std::int64_t> order, std::int64_t batch_size,
         std::int64_t start = 0, std::int64_t epoch = 0, int threads = 1);
  // Stops the worker and waits for it, also when the consumer stopped before the end.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch, or false at the end of the order. Rethrows a failure of the worker.
  bool next(Batch& batch);
  std::int64_t batches() const;  // number of batches this loader yields in total

 private:
  void produce();
  Batch assemble(std::int64_t position) const;
  // The examples of a source-backed batch, made on threads_ threads.
  void make_examples(std::int64_t position, std::int64_t size, std::uint8_t* pixels) const;

  const Dataset dataset_;  // a copy shares the tensors' storage
  const std::vector<std::int64_t> order_;
  const std::int64_t batch_size_;
  const std::int64_t start_;
  const std::int64_t epoch_;
  const int threads_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Batch> ready_;  // the one batch assembled ahead of the consumer
  bool finished_ = false;       // the worker has left: no batch will follow ready_
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;  // last, so it starts after everything it reads
};

}  // namespace alloy::data
