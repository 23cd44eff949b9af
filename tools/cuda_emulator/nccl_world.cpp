#include "tools/cuda_emulator/nccl_world.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>

namespace alloy::emulator::nccl {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMagic = 0x414c4e43;  // "ALNC", published last by the segment's creator
constexpr char kPrefix[] = "/alloy-nccl-";
// Each rank's staging area: big enough that a gradient bucket needs few barriers, small enough
// that a world of several ranks costs little of /dev/shm (pages are only used once written).
constexpr std::size_t kStagingBytes = std::size_t{1} << 20;
constexpr std::size_t kPage = 4096;
// How often a wait asks the kernel whether a peer's process still lives.
constexpr auto kProcessCheck = std::chrono::milliseconds(100);

}  // namespace

// ftruncate zero-fills the segment, so every field below starts at 0 without being constructed:
// lock-free atomics are plain integers in memory, the same in every process that maps them.
static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
              std::atomic<std::int32_t>::is_always_lock_free &&
              std::atomic<std::uint64_t>::is_always_lock_free &&
              std::atomic<pid_t>::is_always_lock_free);

struct Header {
  std::atomic<std::uint32_t> magic;
  std::int32_t nranks;  // written by the creator before `magic`
  std::atomic<std::int32_t> joined;
  std::atomic<std::uint32_t> unlinked;
};

// One cache line per rank, so that a rank's polling does not slow its peers' writes.
struct alignas(64) RankSlot {
  std::atomic<pid_t> pid;  // 0 until the rank joined
  std::atomic<std::uint32_t> gone;
  std::atomic<std::uint64_t> arrived;  // barriers the rank has reached
  Operation operation;                 // written before the barrier that publishes it
};

static_assert(std::is_standard_layout_v<Header> && std::is_standard_layout_v<RankSlot>);
static_assert(sizeof(Header) <= alignof(RankSlot));

namespace {

std::size_t staging_offset(int nranks) {
  const std::size_t end = alignof(RankSlot) + static_cast<std::size_t>(nranks) * sizeof(RankSlot);
  return (end + kPage - 1) / kPage * kPage;
}

std::size_t segment_bytes(int nranks) {
  return staging_offset(nranks) + static_cast<std::size_t>(nranks) * kStagingBytes;
}

std::string system_error(const std::string& call) {
  return call + " failed: " + std::strerror(errno);
}

// The segment name in an id made by make_unique_id, or "" for any other bytes.
std::string segment_name(const ncclUniqueId& id) {
  const std::size_t length = strnlen(id.internal, sizeof id.internal);
  const std::string name(id.internal, length);
  if (length == sizeof id.internal || name.rfind(kPrefix, 0) != 0) return {};
  return name;
}

// Whether process `pid` is still running.
bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A killed child that its parent has not reaped yet still answers kill(): /proc says it is a
  // zombie ("PID (COMMAND) STATE ...", the command may hold spaces and parentheses).
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const std::size_t end = line.rfind(')');
  if (end == std::string::npos || end + 2 >= line.size()) return true;
  return line[end + 2] != 'Z' && line[end + 2] != 'X';
}

// Polls cheaply while a peer is about to arrive (the usual case inside a collective), then
// sleeps, so that a rank waiting seconds for a slower one costs no CPU.
class Backoff {
 public:
  void wait() {
    ++polls_;
    if (polls_ < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(polls_ < 1100 ? 50 : 1000));
    }
  }
  // True every kProcessCheck: time to ask whether waited-for processes live.
  bool process_check_due() {
    const auto now = Clock::now();
    if (now < next_check_) return false;
    next_check_ = now + kProcessCheck;
    return true;
  }

 private:
  int polls_ = 0;
  Clock::time_point next_check_ = Clock::now() + kProcessCheck;
};

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (::close(fd_) != 0) std::perror("CUDA emulator: close of an NCCL segment's descriptor");
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

// A mapping of the segment; the descriptor is closed once mapped.
class Segment {
 public:
  // Creates the segment `name` of `bytes` bytes (the first rank), or maps the one another rank
  // created once it is ready. Null, with `status` set, on failure or once `stop` is set.
  static std::unique_ptr<Segment> attach(const std::string& name, std::size_t bytes,
                                         const std::atomic<bool>& stop, Status& status) {
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    const bool creator = fd >= 0;
    if (!creator && errno != EEXIST) {
      status = {ncclSystemError, system_error("shm_open(" + name + ", O_CREAT | O_EXCL)")};
      return nullptr;
    }
    if (!creator) fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) {
      status = {errno == ENOENT ? ncclInvalidUsage : ncclSystemError,
                errno == ENOENT ? "the communicator " + name +
                                      " is closed: its ranks had all joined, or one left"
                                : system_error("shm_open(" + name + ")")};
      return nullptr;
    }
    const FileDescriptor file(fd);
    if (creator && ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      status = {ncclSystemError, system_error("ftruncate of " + name)};
      static_cast<void>(shm_unlink(name.c_str()));  // nobody can use a segment without a size
      return nullptr;
    }
    // A joiner may open the segment between its creation and its ftruncate.
    struct stat info {};
    Backoff backoff;
    while (true) {
      if (::fstat(fd, &info) != 0) {
        status = {ncclSystemError, system_error("fstat of " + name)};
        return nullptr;
      }
      if (info.st_size != 0) break;
      if (stop.load()) {
        status = {ncclInvalidUsage, "aborted while waiting for " + name + " to be created"};
        return nullptr;
      }
      backoff.wait();
    }
    const auto mapped = static_cast<std::size_t>(info.st_size);
    void* data = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      status = {ncclSystemError, system_error("mmap of " + name)};
      return nullptr;
    }
    return std::unique_ptr<Segment>(new Segment(name, data, mapped, creator));
  }

  ~Segment() {
    if (::munmap(data_, bytes_) != 0) {
      std::perror(("CUDA emulator: munmap of the NCCL segment " + name_).c_str());
    }
  }
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  unsigned char* base() const { return static_cast<unsigned char*>(data_); }
  const std::string& name() const { return name_; }
  // Whether this process created it (and so sets its header up).
  bool created() const { return created_; }

 private:
  Segment(std::string name, void* data, std::size_t bytes, bool created)
      : name_(std::move(name)), data_(data), bytes_(bytes), created_(created) {}

  std::string name_;
  void* data_;
  std::size_t bytes_;
  bool created_;
};

void make_unique_id(ncclUniqueId& id) {
  std::random_device entropy;
  const unsigned long long random = (static_cast<unsigned long long>(entropy()) << 32) |
                                    static_cast<unsigned long long>(entropy());
  std::memset(id.internal, 0, sizeof id.internal);
  std::snprintf(id.internal, sizeof id.internal, "%s%d-%016llx", kPrefix,
                static_cast<int>(::getpid()), random);
}

World::World(std::unique_ptr<Segment> segment, int nranks, int rank)
    : segment_(std::move(segment)), nranks_(nranks), rank_(rank) {}

Header& World::header() const {
  return *reinterpret_cast<Header*>(segment_->base());
}

RankSlot& World::slot(int rank) const {
  return reinterpret_cast<RankSlot*>(segment_->base() + alignof(RankSlot))[rank];
}

std::size_t World::staging_bytes() const {
  return kStagingBytes;
}

unsigned char* World::staging(int rank) const {
  return segment_->base() + staging_offset(nranks_) +
         static_cast<std::size_t>(rank) * kStagingBytes;
}

void World::announce(const Operation& operation) {
  slot(rank_).operation = operation;
}

const Operation& World::announced(int rank) const {
  return slot(rank).operation;
}

std::unique_ptr<World> World::join(const ncclUniqueId& id, int nranks, int rank,
                                   const std::atomic<bool>& stop, Status& status) {
  const std::string name = segment_name(id);
  if (name.empty()) {
    status = {ncclInvalidArgument, "the unique id was not made by ncclGetUniqueId"};
    return nullptr;
  }
  std::unique_ptr<Segment> segment = Segment::attach(name, segment_bytes(nranks), stop, status);
  if (!segment) return nullptr;
  const bool created = segment->created();
  std::unique_ptr<World> world(new World(std::move(segment), nranks, rank));
  Header& header = world->header();
  if (created) {
    header.nranks = nranks;
    header.magic.store(kMagic, std::memory_order_release);
  }
  Backoff backoff;
  while (header.magic.load(std::memory_order_acquire) != kMagic) {
    if (stop.load()) {
      status = {ncclInvalidUsage, "aborted while waiting for " + name + " to be set up"};
      return nullptr;
    }
    backoff.wait();
  }
  if (header.nranks != nranks) {
    status = {ncclInvalidUsage, "rank " + std::to_string(rank) + " was given " +
                                    std::to_string(nranks) + " ranks, the rank that created " +
                                    name + " " + std::to_string(header.nranks)};
    return nullptr;
  }
  RankSlot& mine = world->slot(rank);
  pid_t other = 0;
  if (!mine.pid.compare_exchange_strong(other, ::getpid())) {
    status = {ncclInvalidUsage, "rank " + std::to_string(rank) + " joined twice (pids " +
                                    std::to_string(other) + " and " + std::to_string(::getpid()) +
                                    ")"};
    return nullptr;
  }
  world->joined_ = true;
  if (header.joined.fetch_add(1) + 1 == nranks) {
    const std::string unlinked = world->unlink_name();
    if (!unlinked.empty()) {
      status = {ncclSystemError, unlinked};
      return nullptr;
    }
  }
  while (header.joined.load() < nranks) {
    if (stop.load()) {
      status = {ncclInvalidUsage, "aborted while waiting for all " + std::to_string(nranks) +
                                      " ranks to join (" + std::to_string(header.joined.load()) +
                                      " have)"};
      return nullptr;
    }
    const bool check = backoff.process_check_due();
    for (int peer = 0; peer < nranks; ++peer) {
      const std::string why = world->lost(peer, check);
      // A rank may join and die at once: that is for its first collective to find.
      if (!why.empty() && header.joined.load() < nranks) {
        status = {ncclRemoteError, why + " before every rank had joined"};
        return nullptr;
      }
    }
    backoff.wait();
  }
  // Stream work runs under the emulated runtime's lock: a rank waiting in a collective would
  // keep another rank of its process from ever reaching it.
  for (int peer = 0; peer < nranks; ++peer) {
    const pid_t pid = world->slot(peer).pid.load();
    if (peer != rank && pid == ::getpid()) {
      status = {ncclInvalidUsage, "ranks " + std::to_string(peer) + " and " + std::to_string(rank) +
                                      " are both in process " + std::to_string(pid) +
                                      ": the CUDA emulator's NCCL needs a process per rank"};
      return nullptr;
    }
  }
  return world;
}

World::~World() {
  if (!joined_) return;  // the slot, and the name, belong to the ranks that did join
  leave();
  const std::string unlinked = unlink_name();
  if (!unlinked.empty()) std::fprintf(stderr, "CUDA emulator: %s\n", unlinked.c_str());
}

void World::leave() {
  slot(rank_).gone.store(1, std::memory_order_release);
}

std::string World::unlink_name() {
  if (header().unlinked.exchange(1) != 0) return {};
  if (shm_unlink(segment_->name().c_str()) != 0)
    return system_error("shm_unlink(" + segment_->name() + ")");
  return {};
}

std::string World::lost(int peer, bool check_process) const {
  const RankSlot& theirs = slot(peer);
  const pid_t pid = theirs.pid.load(std::memory_order_acquire);
  if (peer == rank_ || pid == 0) return {};
  const std::string who = "rank " + std::to_string(peer) + " (pid " + std::to_string(pid) + ")";
  if (theirs.gone.load(std::memory_order_acquire) != 0) {
    return who + " left the communicator (aborted or destroyed it)";
  }
  if (check_process && !process_alive(pid)) return who + " exited";
  return {};
}

Status World::barrier(const std::string& what, const std::atomic<bool>& aborted) {
  const std::uint64_t target = ++barriers_;
  slot(rank_).arrived.store(target, std::memory_order_release);
  Backoff backoff;
  int peer = 0;
  while (peer < nranks_) {
    if (slot(peer).arrived.load(std::memory_order_acquire) >= target) {
      ++peer;
      continue;
    }
    if (aborted.load()) {
      return {ncclSystemError, "rank " + std::to_string(rank_) +
                                   "'s communicator was aborted while it waited for rank " +
                                   std::to_string(peer) + " in " + what};
    }
    const std::string why = lost(peer, backoff.process_check_due());
    if (!why.empty()) {
      return {ncclRemoteError,
              why + " while rank " + std::to_string(rank_) + " waited for it in " + what};
    }
    backoff.wait();
  }
  return {};
}

}  // namespace alloy::emulator::nccl
