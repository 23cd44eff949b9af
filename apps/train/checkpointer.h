// The checkpoints `alloy train` writes: DIR/step-%08d.ckpt files, the newest K kept (files of
// steps past the newest save, left by another run, are not touched). Only rank 0 saves.
//
// Synchronously, save() writes the file before training goes on. With --async-checkpoint it
// takes a snapshot of the state and hands it to a writer thread, which serializes, writes,
// fsyncs, renames and prunes while the next steps run. On the CPU the snapshot is a copy of
// every tensor; on a GPU it is a copy of each into pinned memory queued on the device's stream
// with one event after them (apps/train/training_state.h): the training thread queues the next
// steps at once, and the writer thread waits for the event before it reads the copies (a sequence
// model's snapshot is its captured state, downloaded synchronously on a GPU). One save is
// in flight at most: the next save, a stop and the end of training wait for it. A file is reported
// (the JSON log's checkpoint event) only once it is durable, and a failed write is an error naming
// the file at the next poll() (every step) or finish(), with the earlier checkpoints intact (the
// write goes to a temporary file that is removed on failure).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/train/trainer.h"
#include "apps/train/training_state.h"
#include "core/checkpoint/checkpoint.h"
#include "core/round_trips.h"
#include "parallel/process_group.h"

namespace alloy::app {

class Checkpointer {
 public:
  // What one save cost: the seconds the training thread was held up by it (the snapshot, and
  // the write when synchronous, or the wait for the previous save), and the seconds the
  // serialization, write, fsync, rename and pruning took, on whichever thread ran them (for an
  // asynchronous save on a GPU, with the wait for the snapshot's copies). `stall_round_trips`:
  // the host round trips the training thread made for the save (core/round_trips.h); for an
  // asynchronous save on a GPU, one queued download per tensor and no host wait.
  struct Timing {
    double stall_seconds = 0;
    double write_seconds = 0;
    RoundTrips stall_round_trips;
  };
  using Saved = std::function<void(const std::string& path, std::int64_t step, const Timing&)>;

  // Creates `dir` when it does not exist. `saved` hears of each checkpoint once it is durable,
  // on the thread that calls save(), poll() or finish().
  //
  // With `sharded_group` (a --zero 1 run) saves are sharded checkpoints
  // (core/checkpoint/sharded_checkpoint.h): every rank of the group has a Checkpointer and
  // calls save(), step() and finish() at the same points; each writes its shard (on the writer
  // thread when asynchronous), and once every rank's shard is durable rank 0 writes the
  // manifest, prunes and reports the save (`saved` is rank 0's).
  Checkpointer(std::string dir, int keep, Saved saved, bool async = false,
               parallel::ProcessGroup* sharded_group = nullptr);
  // Waits for the save in flight; a failure nobody asked about is printed, not thrown.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // What a save takes of a trainer, on the thread that calls save(): its step, its state in
  // host memory for a synchronous save, and for an asynchronous one a snapshot that training may
  // change the originals of at once. Any trainer can be saved this way (the sequence models'
  // LmTrainer gives its captured state as the snapshot); save(Trainer&) uses
  // capture_training_state and snapshot_training_state.
  struct Source {
    std::int64_t step = 0;
    std::function<checkpoint::CheckpointState()> capture;
    std::function<StateSnapshot(SnapshotArena&)> snapshot;
  };

  // Saves the trainer's state at its current step; returns the path. A second save at the
  // same step (a stop right after a scheduled save) writes nothing and returns the same path.
  // Asynchronously it first waits for the previous save (throwing its failure).
  std::string save(Trainer& trainer);
  // The same for any trainer; not for sharded saves, which need the image Trainer.
  std::string save(const Source& source);
  // Reports a save that has become durable, throws the failure of one that failed; never
  // waits. A no-op for synchronous saves.
  void poll();
  // Sharded saves, at every step on every rank: one collective that tells whether any rank's
  // `stop` is set (returned, so that every rank stops and saves at the same step) and, while an
  // asynchronous save is in flight, whether every rank's shard is durable: then rank 0 writes
  // the manifest. Throws every rank's failure naming the rank and file.
  bool step(bool stop);
  // Waits for the save in flight, then as poll().
  void finish();

  const std::string& dir() const { return dir_; }
  // The newest checkpoint known to be durable (after finish(): the last saved); empty if none.
  const std::string& last_path() const { return last_path_; }
  // The newest checkpoint file in dir() of a step at or before `step`, for the message of a
  // run that diverged; empty when none is left.
  std::string newest_at_or_before(std::int64_t step) const;

 private:
  struct Job {
    std::string path;
    std::int64_t step = 0;
    StateSnapshot snapshot;  // asynchronous saves
    Timing timing;
    ShardedCapture shard;  // sharded saves
  };
  // What rank 0 needs to write a sharded save's manifest once every shard is durable.
  struct ShardedSave {
    std::string step_dir;
    std::int64_t step = 0;
    std::int64_t total = 0;
    std::vector<checkpoint::FlatKind> kinds;
    std::vector<checkpoint::TensorSpec> parameters;
    Timing timing;
  };
  // Writes `state` to `path` atomically and prunes; throws Error naming the file and the cause.
  void write(const std::string& path, std::int64_t step,
             const checkpoint::CheckpointState& state) const;
  // Removes the checkpoints beyond the newest keep_ of those up to `step`.
  void prune(std::int64_t step) const;
  std::string save_sharded(Trainer& trainer);
  // Writes this rank's shard: "ok " and its entry's text, or "fail " and the error.
  static std::string write_shard(const Job& job, int rank);
  // Every rank's outcome of the save in flight (write_shard's texts) is in: the manifest (rank
  // 0), or every rank throws the failures.
  void complete_sharded(const std::vector<std::string>& outcomes);
  void writer_loop();
  // Under mutex_: hands over a finished job's outcome.
  void report_finished(std::unique_lock<std::mutex>& lock);

  std::string dir_;
  int keep_;
  Saved saved_;
  bool async_;
  std::int64_t last_step_ = -1;  // of the newest save started
  std::string last_path_;
  // Where asynchronous snapshots on a GPU are copied to; the save in flight's until it is
  // written (the next save starts after it).
  SnapshotArena arena_;

  // The writer thread and what it shares with the training thread.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Job> pending_;  // handed over, not yet taken by the writer
  bool writing_ = false;        // the writer holds a job
  bool done_ = false;           // a job finished and its outcome was not reported yet
  std::string done_path_;
  std::int64_t done_step_ = 0;
  Timing done_timing_;
  std::string failure_;       // of the finished job; empty when it succeeded
  std::string done_outcome_;  // of a finished sharded job (write_shard's text)
  bool quit_ = false;
  parallel::ProcessGroup* group_ = nullptr;  // sharded saves
  std::optional<ShardedSave> in_flight_;     // a sharded save whose manifest is not written yet
  std::thread writer_;                       // last: started once everything it uses exists
};

}  // namespace alloy::app
