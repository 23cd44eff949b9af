// A download whose host wait is left to its reader, for host code that reads device state
// between training steps without stopping the host (the overflow monitor's poll,
// apps/train/overflow_monitor.h). queue() starts copying a tensor's bytes into host memory held
// here and returns; arrived() says, without waiting, whether they are there; read() hands them
// over, waiting only if they are not. One copy at a time.
//
// On CUDA the copy goes into pinned memory (cuda::download_async) on the device's stream, so it
// reads what the work queued before it writes and nothing queued after it, and an event
// recorded after it answers arrived(). Round trips (core/round_trips.h): one download at
// queue(), and a host wait only where read() finds the copy still running. On the CPU the
// device is the host: queue() copies at once and arrived() is true; it counts one download and
// no host wait, what the same use costs on a GPU when the reader asks arrived() first.
#pragma once

#include <memory>

#include "core/tensor.h"

namespace alloy {

class QueuedDownload {
 public:
  QueuedDownload();
  // Waits for a copy still running (quietly: it writes into memory freed here).
  ~QueuedDownload();
  QueuedDownload(QueuedDownload&&) noexcept;
  QueuedDownload& operator=(QueuedDownload&&) noexcept;

  // Starts copying `source`'s bytes (a contiguous tensor on any device) to the host. An error
  // while a copy is queued and not read.
  void queue(const Tensor& source);
  // A copy queued and not read yet.
  bool queued() const { return queued_; }
  // Without waiting: whether the queued copy has arrived (true on the CPU).
  bool arrived();
  // The queued copy's bytes, after waiting for them if they have not arrived (a host wait on
  // CUDA only then). Valid until the next queue(); the copy is read: queued() is false.
  const void* read();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool queued_ = false;
};

}  // namespace alloy
