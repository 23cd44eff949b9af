// Batches of (u8 images, i32 labels) in a given order, assembled on a background thread ahead of
// the consumer: one batch ahead for a dataset in memory, two for a source's examples (decoded
// images), which are made on the process's worker pool (core/data/worker_pool.h), whose threads
// outlive the loader.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/data/dataset.h"
#include "core/data/worker_pool.h"

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
  // has its examples made for `epoch` by `threads` threads of the shared worker pool, each
  // example by whichever thread is free; a failure there (a bad image file) surfaces from next()
  // too, the batch's first bad example's.
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
  // The examples of a source-backed batch, made on pool_ (or here with one thread).
  void make_examples(std::int64_t position, std::int64_t size, std::uint8_t* pixels) const;

  const Dataset dataset_;  // a copy shares the tensors' storage
  const std::vector<std::int64_t> order_;
  const std::int64_t batch_size_;
  const std::int64_t start_;
  const std::int64_t epoch_;
  const int threads_;
  const std::shared_ptr<WorkerPool> pool_;  // null with one thread or without a source
  // Batches assembled before the consumer asks: two for decoded images, whose time varies
  // from batch to batch; one for a copy from memory.
  const std::size_t ahead_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;  // assembled ahead of the consumer, oldest first
  bool finished_ = false;    // the worker has left: no batch will follow ready_
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;  // last, so it starts after everything it reads
};

}  // namespace alloy::data
