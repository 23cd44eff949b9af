// Threads that live as long as the pool and run one job at a time: a job calls a task once for
// every index of a range, the indices handed out one by one to whichever thread is free. The
// loader's image decoding runs on such a pool, so a run starts its decode threads once, not
// once per batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace alloy::data {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  // Stops the threads and waits for them.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }

  // Calls task(i) for every i in [0, count) on the pool's threads and returns once all calls
  // are done. Every index is run, also after a failure; the failure of the lowest index is
  // rethrown, so which one surfaces does not depend on the threads' timing. Jobs from several
  // callers run one after the other.
  void run(std::int64_t count, const std::function<void(std::int64_t)>& task);

 private:
  void work();

  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(std::int64_t)>* task_ = nullptr;
  std::int64_t count_ = 0;
  std::int64_t next_ = 0;  // the next index to hand out
  int busy_ = 0;           // threads still in the current job
  std::uint64_t job_ = 0;  // counts the jobs started
  bool stopping_ = false;
  std::int64_t failed_index_ = -1;
  std::exception_ptr failure_;
  std::vector<std::thread> threads_;  // last, so they start after everything they read
};

// The process's pool of `threads` threads, made on first use and kept until a different count is
// asked for (or the process ends): the loaders of successive epochs and evaluation's share it.
std::shared_ptr<WorkerPool> shared_worker_pool(int threads);

}  // namespace alloy::data
