#include "core/data/worker_pool.h"

#include <utility>

#include "core/error.h"

namespace alloy::data {

WorkerPool::WorkerPool(int threads) {
  ALLOY_CHECK(threads >= 1, "worker pool: at least 1 thread, got ", threads);
  threads_.reserve(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t)
    threads_.emplace_back([this] { work(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& thread : threads_)
    thread.join();
}

void WorkerPool::run(std::int64_t count, const std::function<void(std::int64_t)>& task) {
  if (count <= 0) return;
  std::lock_guard<std::mutex> job(job_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  task_ = &task;
  count_ = count;
  next_ = 0;
  busy_ = threads();
  failed_index_ = -1;
  failure_ = nullptr;
  ++job_;
  start_.notify_all();
  done_.wait(lock, [this] { return busy_ == 0; });
  task_ = nullptr;
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void WorkerPool::work() {
  std::uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return stopping_ || job_ != seen; });
    if (stopping_) return;
    seen = job_;
    while (next_ < count_) {
      const std::int64_t index = next_++;
      lock.unlock();
      std::exception_ptr error;
      try {
        (*task_)(index);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && (failed_index_ < 0 || index < failed_index_)) {
        failed_index_ = index;
        failure_ = error;
      }
    }
    if (--busy_ == 0) done_.notify_all();
  }
}

std::shared_ptr<WorkerPool> shared_worker_pool(int threads) {
  static std::mutex mutex;
  static std::shared_ptr<WorkerPool> current;  // kept between epochs: threads start once a run
  std::lock_guard<std::mutex> lock(mutex);
  if (!current || current->threads() != threads) current = std::make_shared<WorkerPool>(threads);
  return current;
}

}  // namespace alloy::data
