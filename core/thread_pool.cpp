#include "core/thread_pool.h"

#include <memory>

#include "core/error.h"

namespace alloy {

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  ALLOY_CHECK(threads >= 1, "thread count must be at least 1, got ", threads);
  // Chunk 0 runs on the calling thread; the others on workers.
  for (int index = 1; index < threads; ++index)
    workers_.emplace_back([this, index] { worker(index); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : workers_)
    thread.join();
}

void ThreadPool::parallel_for(std::int64_t count, const Body& body) {
  if (threads_ == 1 || count <= 1) {
    for (int chunk = 0; chunk < threads_; ++chunk) {
      std::int64_t begin, end;
      chunk_range(count, threads_, chunk, begin, end);
      if (begin < end) body(begin, end, chunk);
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    count_ = count;
    pending_ = threads_ - 1;
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr own_error;
  try {
    std::int64_t begin, end;
    chunk_range(count, threads_, 0, begin, end);
    if (begin < end) body(begin, end, 0);
  } catch (...) {
    own_error = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return pending_ == 0; });
  body_ = nullptr;
  if (own_error) std::rethrow_exception(own_error);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    const Body* body;
    std::int64_t count;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      body = body_;
      count = count_;
    }
    std::exception_ptr error;
    try {
      std::int64_t begin, end;
      chunk_range(count, threads_, index, begin, end);
      if (begin < end) (*body)(begin, end, index);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
}  // namespace

ThreadPool& cpu_pool() {
  auto& pool = pool_slot();
  if (!pool) {
    const unsigned cores = std::thread::hardware_concurrency();
    pool = std::make_unique<ThreadPool>(cores == 0 ? 1 : static_cast<int>(cores));
  }
  return *pool;
}

void set_cpu_threads(int threads) {
  ALLOY_CHECK(threads >= 1, "--threads must be at least 1, got ", threads);
  auto& pool = pool_slot();
  if (pool && pool->size() == threads) return;
  pool.reset();
  pool = std::make_unique<ThreadPool>(threads);
}

int cpu_threads() {
  return cpu_pool().size();
}

}  // namespace alloy
