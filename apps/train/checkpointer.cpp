#include "apps/train/checkpointer.h"

#include <chrono>
#include <filesystem>
#include <iostream>
#include <utility>
#include <vector>

#include "apps/train/training_state.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/error.h"

namespace alloy::app {

namespace ckpt = alloy::checkpoint;

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

Checkpointer::Checkpointer(std::string dir, int keep, Saved saved, bool async)
    : dir_(std::move(dir)), keep_(keep), saved_(std::move(saved)), async_(async) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) fail("cannot create checkpoint directory ", dir_, ": ", error.message());
  if (async_) writer_ = std::thread([this] { writer_loop(); });
}

Checkpointer::~Checkpointer() {
  if (!async_) return;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !pending_ && !writing_; });
    quit_ = true;
  }
  changed_.notify_all();
  writer_.join();
  // Only when training ended by an error of its own, which is the one to report; this one must
  // not hide it, nor be lost.
  if (done_ && !failure_.empty()) std::cerr << "alloy: error: " << failure_ << std::endl;
}

void Checkpointer::write(const std::string& path, std::int64_t step,
                         const checkpoint::CheckpointState& state) const {
  try {
    ckpt::write_checkpoint(path, state);
  } catch (const Error& error) {
    fail("cannot save checkpoint ", path, ": ", error.what(),
         " (no file was left under that name; the earlier checkpoints are intact)");
  }
  // Checkpoints past this one are another run's (this one resumed from an earlier file of the
  // same directory): they are neither counted nor removed, so pruning never takes the file
  // just written, the newest complete one.
  std::vector<ckpt::CheckpointEntry> ours;
  for (const auto& entry : ckpt::list_checkpoints(dir_)) {
    if (entry.step <= step) ours.push_back(entry);
  }
  const std::size_t keep = static_cast<std::size_t>(keep_);
  for (std::size_t i = 0; i + keep < ours.size(); ++i)
    ckpt::remove_checkpoint(ours[i]);
  // Sharded saves that never completed (a rank died while writing): no reader sees them.
  for (const auto& entry : ckpt::list_incomplete_sharded(dir_)) {
    if (entry.step < step) ckpt::remove_checkpoint(entry);
  }
}

std::string Checkpointer::save(Trainer& trainer) {
  if (trainer.steps() == last_step_) return ckpt::checkpoint_path(dir_, last_step_);
  const auto start = std::chrono::steady_clock::now();
  RoundTrips trips = round_trips();
  Job job{ckpt::checkpoint_path(dir_, trainer.steps()), trainer.steps(), {}, {}};
  if (!async_) {
    const ckpt::CheckpointState state = capture_training_state(trainer);
    const auto writing = std::chrono::steady_clock::now();
    write(job.path, job.step, state);
    job.timing.write_seconds = seconds_since(writing);
    job.timing.stall_seconds = seconds_since(start);
    job.timing.stall_round_trips = round_trips() - trips;
    last_step_ = job.step;
    last_path_ = job.path;
    if (saved_) saved_(job.path, job.step, job.timing);
    return job.path;
  }
  finish();  // one save in flight at most; the arena is free again
  // From here the writer is idle until the hand-over below: these round trips are the training
  // thread's alone.
  trips = round_trips();
  // The snapshot: training may change the originals at once (on a GPU, in stream order after
  // the copies).
  job.snapshot = snapshot_training_state(trainer, arena_);
  job.timing.stall_seconds = seconds_since(start);
  job.timing.stall_round_trips = round_trips() - trips;
  last_step_ = job.step;
  const std::string path = job.path;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    pending_ = std::move(job);
  }
  changed_.notify_all();
  return path;
}

void Checkpointer::writer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return quit_ || pending_.has_value(); });
    if (!pending_) return;  // quit_, with nothing left to write
    Job job = std::move(*pending_);
    pending_.reset();
    writing_ = true;
    lock.unlock();
    std::string failure;
    const auto writing = std::chrono::steady_clock::now();
    try {
      write(job.path, job.step, job.snapshot.take());
    } catch (const Error& error) {
      failure = error.what();
    } catch (const std::exception& error) {
      failure = "cannot save checkpoint " + job.path + ": " + error.what();
    }
    lock.lock();
    writing_ = false;
    done_ = true;
    done_path_ = job.path;
    done_step_ = job.step;
    done_timing_ = job.timing;
    done_timing_.write_seconds = seconds_since(writing);
    failure_ = std::move(failure);
    changed_.notify_all();
  }
}

void Checkpointer::report_finished(std::unique_lock<std::mutex>& lock) {
  if (!done_) return;
  done_ = false;
  const std::string failure = std::move(failure_);
  failure_.clear();
  const std::string path = done_path_;
  const std::int64_t step = done_step_;
  const Timing timing = done_timing_;
  lock.unlock();
  if (!failure.empty()) throw Error(failure);
  last_path_ = path;
  if (saved_) saved_(path, step, timing);
}

void Checkpointer::poll() {
  if (!async_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  report_finished(lock);
}

void Checkpointer::finish() {
  if (!async_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !pending_ && !writing_; });
  report_finished(lock);
}

std::string Checkpointer::newest_at_or_before(std::int64_t step) const {
  std::string found;
  for (const auto& entry : ckpt::list_checkpoints(dir_)) {
    if (entry.step <= step) found = entry.path;
  }
  return found;
}

}  // namespace alloy::app
