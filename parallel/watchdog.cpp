#include "parallel/watchdog.h"

#include "core/error.h"
#include "parallel/socket.h"

namespace alloy::parallel {

Watchdog::Watchdog(std::chrono::milliseconds timeout, Hooks hooks, std::chrono::milliseconds period)
    : timeout_(timeout), period_(period), hooks_(std::move(hooks)) {
  thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Watchdog::track(std::string what, std::function<bool()> done) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) return;
    work_.push_back(
        {std::move(what), std::move(done), std::chrono::steady_clock::now() + timeout_});
  }
  changed_.notify_all();
}

std::size_t Watchdog::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return work_.size();
}

bool Watchdog::failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

// Runs the failure callback without the lock (it may take seconds: NCCL's abort, asking the
// store which rank left) and stops tracking.
void Watchdog::fail(const std::string& what, const std::string& cause,
                    std::unique_lock<std::mutex>& lock) {
  failed_ = true;
  work_.clear();
  lock.unlock();
  if (hooks_.on_failure) hooks_.on_failure(what, cause);
  lock.lock();
}

void Watchdog::watch() {
  std::string start_failure;
  if (hooks_.on_start) {
    try {
      hooks_.on_start();
    } catch (const Error& error) {
      start_failure = error.what();
    }
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (!start_failure.empty()) fail("starting the watchdog", start_failure, lock);
  while (true) {
    changed_.wait_for(lock, period_, [&] { return stopping_; });
    if (stopping_) return;
    if (failed_ || work_.empty()) {
      changed_.wait(lock, [&] { return stopping_ || (!failed_ && !work_.empty()); });
      continue;
    }
    // Polling stops at the first work still running. Work on one stream completes in order;
    // work on several streams (the group's own, a communication stream, a graph's launches) may
    // not, but deadlines grow in queue order, so the oldest unfinished work, which is checked
    // below, is the first to be late: a later one that hangs is found once those before it
    // are done.
    try {
      while (!work_.empty() && work_.front().done())
        work_.pop_front();
    } catch (const Error& error) {
      const std::string what = work_.front().what;
      fail(what, error.what(), lock);
      continue;
    }
    if (work_.empty()) continue;
    const std::string oldest = work_.front().what;
    const auto deadline = work_.front().deadline;
    if (hooks_.health) {
      lock.unlock();
      std::string cause;
      try {
        cause = hooks_.health();
      } catch (const Error& error) {
        cause = error.what();
      }
      lock.lock();
      if (!cause.empty() && !failed_) {
        fail(oldest, cause, lock);
        continue;
      }
    }
    if (!failed_ && std::chrono::steady_clock::now() > deadline) {
      fail(oldest, "timed out after " + seconds_str(timeout_), lock);
    }
  }
}

}  // namespace alloy::parallel
