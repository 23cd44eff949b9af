// The ranks of an emulated NCCL communicator, each in its own process on this machine, meeting
// in a POSIX shared-memory segment that the communicator's unique id names: the rendezvous,
// per-rank staging areas that carry the collectives' data, and barriers that never wait for a
// rank that aborted, left or died. nccl.cpp builds the NCCL calls on it.
//
// The segment holds a header, one slot per rank (its pid, its barrier count, a "gone" flag, the
// collective it is in) and one staging area per rank. The first rank to arrive creates it; the
// name is unlinked as soon as every rank has joined (or when a rank leaves first), so a normal
// run leaves nothing in /dev/shm. Every rank maps it until its World is destroyed.
#pragma once

#include <nccl.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace alloy::emulator::nccl {

// A failure of a call or a wait: the NCCL result and what ncclGetLastError says.
struct Status {
  ncclResult_t result = ncclSuccess;
  std::string text;
  bool ok() const { return result == ncclSuccess; }
};

// Fills `id` with a fresh segment name ("/alloy-nccl-PID-RANDOM"), NUL-padded.
void make_unique_id(ncclUniqueId& id);

// The collective a rank is in, compared across ranks so that mismatched calls fail by name
// instead of mixing unrelated buffers (real NCCL would hang or corrupt them).
struct Operation {
  std::int32_t kind = 0;  // 0: all-reduce, 1: broadcast, 2: reduce
  std::int32_t type = 0;  // ncclDataType_t
  std::int32_t op = 0;    // ncclRedOp_t for a reduction, the root for a broadcast
  std::uint64_t count = 0;
  std::int32_t root = 0;  // a reduce's
};

class Segment;
struct Header;
struct RankSlot;

class World {
 public:
  // Joins `rank` of `nranks` to the world that `id` names and waits until every rank has
  // joined. Gives up (null, with `status` saying why) on a bad id, a rank claimed twice, a
  // disagreement on the number of ranks, a joined rank that died or left, or once `stop` is
  // set (an abort of the communicator being made).
  static std::unique_ptr<World> join(const ncclUniqueId& id, int nranks, int rank,
                                     const std::atomic<bool>& stop, Status& status);
  // Marks this rank gone, so that peers waiting for it stop, and unmaps the segment.
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // Bytes of each rank's staging area: a collective moves its buffers in chunks of this.
  std::size_t staging_bytes() const;
  unsigned char* staging(int rank) const;

  // Publishes the collective this rank is about to run; valid for peers after the next barrier.
  void announce(const Operation& operation);
  const Operation& announced(int rank) const;

  // Waits until every rank has reached this barrier (the n-th call of every rank). Fails, with
  // the lost rank named, as soon as `aborted` is set, a rank that has not arrived is gone
  // (aborted or destroyed its communicator), or its process has exited.
  Status barrier(const std::string& what, const std::atomic<bool>& aborted);

  // Tells waiting peers that this rank will not come (ncclCommAbort).
  void leave();

 private:
  World(std::unique_ptr<Segment> segment, int nranks, int rank);
  Header& header() const;
  RankSlot& slot(int rank) const;
  // Why rank `peer` will never arrive, or "" while it still may. `check_process` asks the
  // kernel whether its process lives (a system call: done only every so often).
  std::string lost(int peer, bool check_process) const;
  // Removes the segment's name unless a rank did already; "" or what failed.
  std::string unlink_name();

  std::unique_ptr<Segment> segment_;
  int nranks_;
  int rank_;
  bool joined_ = false;         // this rank's slot is claimed
  std::uint64_t barriers_ = 0;  // barriers this rank has entered
};

}  // namespace alloy::emulator::nccl
