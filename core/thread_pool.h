// A fixed pool of worker threads. parallel_for splits a range into one contiguous chunk per
// thread, always the same way for the same thread count, which is what keeps CPU results
// bit-identical from run to run.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace alloy {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Calls body(begin, end, chunk) for `chunks` contiguous slices of [0, count), chunk k on
  // thread k. chunks defaults to the pool size; slices may be empty. Blocks until all finish
  // and rethrows the first exception a slice threw.
  using Body = std::function<void(std::int64_t begin, std::int64_t end, int chunk)>;
  void parallel_for(std::int64_t count, const Body& body);

 private:
  void worker(int index);

  int threads_;
  // Whether waits poll a little before they sleep: only where each thread can have a core.
  bool polls_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const Body* body_ = nullptr;
  std::int64_t count_ = 0;
  // Written under mutex_, read without it by polling waits.
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  std::exception_ptr error_;
};

// The process-wide pool the CPU kernels use. Its size is set once from --threads (default:
// the number of cores) before the first kernel runs; set_cpu_threads resizes it.
ThreadPool& cpu_pool();
void set_cpu_threads(int threads);
int cpu_threads();

// The slice of [0, count) that chunk `index` of `chunks` owns.
inline void chunk_range(std::int64_t count, int chunks, int index, std::int64_t& begin,
                        std::int64_t& end) {
  const std::int64_t base = count / chunks;
  const std::int64_t extra = count % chunks;
  begin = index * base + (index < extra ? index : extra);
  end = begin + base + (index < extra ? 1 : 0);
}

}  // namespace alloy
