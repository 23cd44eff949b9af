#include "core/thread_pool.h"

#include <chrono>
#include <memory>

#include "core/error.h"

namespace alloy {

namespace {

// How long a wait polls before it sleeps on a condition variable. A training step hands the
// pool a few hundred short loops, microseconds apart: a sleeping worker takes tens of
// microseconds to wake for each (futex wake, context switch), a tenth of a small GPT's step on
// two cores. A polling one sees the next loop at once, and gives the core back this soon after
// the last. It polls by yielding, not with pause: on a loaded machine a thread that spun kept
// the core from the very thread it waited for, and a loop took a millisecond (measured with
// other processes keeping 15 cores' worth of threads runnable on 2).
constexpr auto kPoll = std::chrono::microseconds(200);

// Polls until ready() or kPoll has passed; returns ready().
template <class Ready>
bool poll_until(const Ready& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kPoll;
  for (;;) {
    for (int i = 0; i < 4; ++i) {
      if (ready()) return true;
      std::this_thread::yield();
    }
    if (std::chrono::steady_clock::now() > deadline) return ready();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  ALLOY_CHECK(threads >= 1, "thread count must be at least 1, got ", threads);
  const unsigned cores = std::thread::hardware_concurrency();
  polls_ = cores == 0 || static_cast<unsigned>(threads) <= cores;
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
    generation_.fetch_add(1, std::memory_order_release);
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
  const auto finished = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!polls_ || !poll_until(finished)) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  body_ = nullptr;
  if (own_error) std::rethrow_exception(own_error);
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker(int index) {
  std::uint64_t seen = 0;
  for (;;) {
    const auto woken = [&] {
      return stopping_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    const Body* body;
    std::int64_t count;
    {
      if (polls_) poll_until(woken);
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, woken);
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
    if (error) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = error;
    }
    // The last worker out wakes the caller if it sleeps; under the lock, so that the wake
    // cannot fall between the caller's check and its wait.
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
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
