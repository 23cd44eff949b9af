#include "apps/train/checkpointer.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <utility>
#include <vector>

#include "apps/train/elastic.h"
#include "apps/train/training_state.h"
#include "core/checkpoint/checkpoint_file.h"
#include "core/checkpoint/sharded_checkpoint.h"
#include "core/error.h"

namespace alloy::app {

namespace ckpt = alloy::checkpoint;

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
// For the test that kills a rank in the middle of a sharded save
// (tests/e2e/zero_checkpoint_test.cpp): ALLOY_TEST_PAUSE_SHARD="STEP RANK" makes rank RANK of a
// job's first generation say so on stderr and sleep before it writes its shard of step STEP,
// while the other ranks' shards are written and they wait for its entry.
void pause_for_tests(std::int64_t step, int rank) {
  const char* pause = std::getenv("ALLOY_TEST_PAUSE_SHARD");
  const char* generation = std::getenv(kRestartGenerationVariable);
  long long pause_step = -1;
  int pause_rank = -1;
  if (pause == nullptr || (generation != nullptr && std::string(generation) != "0") ||
      std::sscanf(pause, "%lld %d", &pause_step, &pause_rank) != 2 || pause_step != step ||
      pause_rank != rank) {
    return;
  }
  std::cerr << "alloy: test: rank " << rank << " pauses before its shard of step " << step
            << std::endl;
  std::this_thread::sleep_for(std::chrono::seconds(120));
}

}  // namespace

Checkpointer::Checkpointer(std::string dir, int keep, Saved saved, bool async,
                           parallel::ProcessGroup* sharded_group)
    : dir_(std::move(dir)),
      keep_(keep),
      saved_(std::move(saved)),
      async_(async),
      group_(sharded_group) {
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
  prune(step);
}

void Checkpointer::prune(std::int64_t step) const {
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
  if (group_) return save_sharded(trainer);
  return save(
      Source{trainer.steps(), [&trainer] { return capture_training_state(trainer); },
             [&trainer](SnapshotArena& arena) { return snapshot_training_state(trainer, arena); }});
}

std::string Checkpointer::save(const Source& source) {
  ALLOY_CHECK(!group_, "a sharded checkpoint is saved from the trainer itself");
  if (source.step == last_step_) return ckpt::checkpoint_path(dir_, last_step_);
  const auto start = std::chrono::steady_clock::now();
  RoundTrips trips = round_trips();
  Job job;
  job.path = ckpt::checkpoint_path(dir_, source.step);
  job.step = source.step;
  if (!async_) {
    const ckpt::CheckpointState state = source.capture();
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
  job.snapshot = source.snapshot(arena_);
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
    std::string outcome;
    const auto writing = std::chrono::steady_clock::now();
    if (group_) {
      outcome = write_shard(job, group_->rank());
    } else {
      try {
        write(job.path, job.step, job.snapshot.take());
      } catch (const Error& error) {
        failure = error.what();
      } catch (const std::exception& error) {
        failure = "cannot save checkpoint " + job.path + ": " + error.what();
      }
    }
    lock.lock();
    done_outcome_ = std::move(outcome);
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
  if (!async_ || group_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  report_finished(lock);
}

void Checkpointer::finish() {
  if (!async_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !pending_ && !writing_; });
  if (!group_) {
    report_finished(lock);
    return;
  }
  if (!in_flight_) return;
  done_ = false;
  const std::string outcome = done_outcome_;
  lock.unlock();
  complete_sharded(group_->allgather_bytes(outcome));
}

std::string Checkpointer::write_shard(const Job& job, int rank) {
  pause_for_tests(job.step, rank);
  try {
    const ckpt::ShardEntry entry =
        ckpt::write_shard(job.path, rank, job.shard.range.begin, job.shard.range.end,
                          job.shard.ranges, job.shard.shared);
    return "ok " + ckpt::encode_shard_entry(entry);
  } catch (const std::exception& error) {
    return "fail " + (job.path + "/" + ckpt::shard_file_name(rank)) + ": " + error.what();
  }
}

std::string Checkpointer::save_sharded(Trainer& trainer) {
  const std::string step_dir = ckpt::sharded_checkpoint_dir(dir_, trainer.steps());
  if (trainer.steps() == last_step_) return step_dir;
  const auto start = std::chrono::steady_clock::now();
  finish();  // the save in flight is complete (a collective) and the writer is free
  const RoundTrips trips = round_trips();
  Job job;
  job.path = step_dir;
  job.step = trainer.steps();
  job.shard = capture_sharded_state(trainer);
  ShardedSave save{step_dir, job.step, job.shard.total, {}, job.shard.parameters, {}};
  for (const ckpt::FlatRange& range : job.shard.ranges)
    save.kinds.push_back({range.kind, range.dtype});
  last_step_ = job.step;
  if (!async_) {
    const auto writing = std::chrono::steady_clock::now();
    const std::string outcome = write_shard(job, group_->rank());
    save.timing.write_seconds = seconds_since(writing);
    save.timing.stall_seconds = seconds_since(start);
    save.timing.stall_round_trips = round_trips() - trips;
    in_flight_ = std::move(save);
    complete_sharded(group_->allgather_bytes(outcome));
    return step_dir;
  }
  save.timing.stall_seconds = seconds_since(start);
  save.timing.stall_round_trips = round_trips() - trips;
  in_flight_ = std::move(save);
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    pending_ = std::move(job);
  }
  changed_.notify_all();
  return step_dir;
}

bool Checkpointer::step(bool stop) {
  ALLOY_CHECK(group_ != nullptr, "Checkpointer::step is for sharded saves");
  std::string mine = stop ? "1" : "0";
  if (in_flight_ && async_) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (done_ && !pending_ && !writing_) mine += done_outcome_;
  }
  const std::vector<std::string> all = group_->allgather_bytes(mine);
  bool any_stop = false;
  bool all_written = in_flight_ && async_;
  std::vector<std::string> outcomes;
  for (const std::string& text : all) {
    any_stop = any_stop || text.front() == '1';
    all_written = all_written && text.size() > 1;
    outcomes.push_back(text.substr(1));
  }
  if (all_written) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      done_ = false;
    }
    complete_sharded(outcomes);
  }
  return any_stop;
}

void Checkpointer::complete_sharded(const std::vector<std::string>& outcomes) {
  ShardedSave save = std::move(*in_flight_);
  in_flight_.reset();
  std::string failures;
  ckpt::Manifest manifest;
  for (std::size_t rank = 0; rank < outcomes.size(); ++rank) {
    const std::string& outcome = outcomes[rank];
    if (outcome.rfind("ok ", 0) == 0) {
      manifest.shards.push_back(ckpt::decode_shard_entry(outcome.substr(3)));
    } else {
      failures += (failures.empty() ? "" : "; ") + outcome.substr(5);
    }
  }
  if (!failures.empty()) {
    fail("cannot save checkpoint ", save.step_dir, ": ", failures,
         " (no manifest was written, so no reader takes it; the earlier checkpoints are intact)");
  }
  if (group_->rank() != 0) {
    last_path_ = save.step_dir;
    return;
  }
  const auto writing = std::chrono::steady_clock::now();
  manifest.step = save.step;
  manifest.world_size = group_->size();
  manifest.total = save.total;
  manifest.kinds = save.kinds;
  manifest.parameters = ckpt::flat_layout(save.parameters);
  try {
    ckpt::write_manifest(save.step_dir, manifest);
  } catch (const Error& error) {
    fail("cannot save checkpoint ", save.step_dir, ": ", error.what(),
         " (no manifest was written; the earlier checkpoints are intact)");
  }
  prune(save.step);
  save.timing.write_seconds += seconds_since(writing);
  last_path_ = save.step_dir;
  if (saved_) saved_(save.step_dir, save.step, save.timing);
}

std::string Checkpointer::newest_at_or_before(std::int64_t step) const {
  std::string found;
  for (const auto& entry : ckpt::list_checkpoints(dir_)) {
    if (entry.step <= step) found = entry.path;
  }
  return found;
}

}  // namespace alloy::app
