// Moves the loader's host batches to the training device without the host waiting for it.
//
// On CUDA each batch is copied into one of two pinned host buffers and uploaded from there
// (cuda::upload_async) on the stager's own copy stream, into one of two device buffers, so the
// next batch's upload runs while the current step computes. Events order it all, on the device:
//  - the compute stream (the device's one stream) waits for a batch's upload before any work
//    queued after take();
//  - an upload waits for the compute work queued before its prefetch(), so it never
//    overwrites a device buffer a queued step still reads;
//  - a pinned buffer is rewritten only when its previous upload is done: the host waits for
//    that upload's event only when it is still in flight (busy_waits(); none while the device
//    keeps up with the host). Such a wait is back-pressure (core/round_trips.h counts it in
//    backpressure_waits as well as host_waits): the upload is queued behind the steps before
//    it, and the host is two batches ahead of the device.
// There is no stream synchronise. On the CPU the device is the host: prefetch() keeps the host
// batch as it is and counts one upload per tensor (images and labels, core/round_trips.h), the
// uploads the same step makes on a GPU.
//
// Use: prefetch the first batch; then per step take() it, prefetch the next, queue the step.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "core/data/loader.h"

namespace alloy::data {

class BatchStager {
 public:
  explicit BatchStager(Device device);
  // Waits for uploads still reading pinned memory, then frees it.
  ~BatchStager();
  BatchStager(const BatchStager&) = delete;
  BatchStager& operator=(const BatchStager&) = delete;

  Device device() const { return device_; }

  // Starts moving `host` (host u8 images and i32 labels) to the device and returns without
  // waiting for the copy. At most two batches wait to be taken; a third is an error. The
  // buffers this batch goes to are those of the batch taken two take()s ago: queue every use of
  // that batch before calling this.
  void prefetch(const Batch& host);
  // The oldest prefetched batch, on the device (on the CPU, the host batch itself). Work queued
  // on the device's stream from now on sees its upload complete.
  Batch take();
  // take(), then a copy of the batch into `destination`'s images and labels (on the device,
  // shaped like the batch) queued on the device's stream: a step input at fixed addresses,
  // for a captured CUDA graph. The copy is device work, neither an upload nor a wait.
  void take_into(Batch& destination);
  std::size_t pending() const { return pending_.size(); }
  // Drops the batches prefetched and not taken (after a stop mid-epoch, say).
  void clear() { pending_.clear(); }

  // Host waits prefetch() made because a pinned buffer's previous upload was still running
  // (each counted as a back-pressure wait, core/round_trips.h).
  std::uint64_t busy_waits() const { return busy_waits_; }

 private:
  struct CudaState;  // streams, events and buffers of the CUDA path
  struct Staged {
    Batch batch;    // on the device
    int slot = -1;  // the CUDA buffers it went to
  };

  Device device_;
  std::deque<Staged> pending_;  // prefetched, not taken, oldest first
  std::uint64_t busy_waits_ = 0;
  std::unique_ptr<CudaState> cuda_;  // CUDA devices only
};

}  // namespace alloy::data
