// Watchdog: bounds work that the host does not wait for. Each tracked piece of work (a
// collective queued on any of the device streams a group uses, or a CUDA graph launch holding
// collectives) is polled from the watchdog's own thread until it is
// done; when one outlives the timeout, or the health check reports a failure, the failure
// callback runs once (the NCCL group aborts its communicator there and remembers the error that
// every later call throws), and nothing more is tracked. This is what turns a dead rank into an
// error within bounded time when no thread is waiting for the collective that hangs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace alloy::parallel {

class Watchdog {
 public:
  struct Hooks {
    std::function<void()> on_start;  // first thing on the watchdog's thread (selects a device)
    // "" while healthy, else the cause of a failure of everything tracked (NCCL's async error).
    std::function<std::string()> health;
    // Called once, from the watchdog's thread, with the oldest unfinished work and the cause.
    std::function<void(const std::string& what, const std::string& cause)> on_failure;
  };

  // `period`: how often tracked work is polled.
  Watchdog(std::chrono::milliseconds timeout, Hooks hooks,
           std::chrono::milliseconds period = std::chrono::milliseconds(10));
  // Stops the thread without waiting for the tracked work.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Tracks work described by `what` (e.g. "allreduce_sum of f32[1024] on rank 1 of 2"):
  // `done` is polled until it returns true; if it throws alloy::Error, that is the failure.
  // The timeout runs from now. Ignored after a failure.
  void track(std::string what, std::function<bool()> done);
  // Tracked work not yet seen done.
  std::size_t pending() const;
  bool failed() const;

 private:
  struct Work {
    std::string what;
    std::function<bool()> done;
    std::chrono::steady_clock::time_point deadline;
  };
  void watch();
  void fail(const std::string& what, const std::string& cause, std::unique_lock<std::mutex>& lock);

  const std::chrono::milliseconds timeout_;
  const std::chrono::milliseconds period_;
  Hooks hooks_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Work> work_;  // in the order it was queued
  bool failed_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything it reads
};

}  // namespace alloy::parallel
