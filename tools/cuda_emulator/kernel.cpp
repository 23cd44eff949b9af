// The kernel engine (kernel.h) and the engine side of device.h's builtins.
//
// A grid runs on the calling OS thread, one block after another. A block's threads run on
// fibers: a worker fiber runs threads one after another until one suspends at a barrier or a
// warp collective, and the next thread then starts on a new worker, so a kernel without
// barriers runs a whole block on one fiber, and one with barriers has a fiber per suspended
// thread. When nothing can run, the scheduler releases the warp collectives whose lanes have
// all arrived (running a warp task once for its warp), else the block barrier, else the block is
// stuck on undefined behaviour and the engine throws DeviceFault. Fiber stacks come from a
// per-OS-thread pool, mapped once.
#include "tools/cuda_emulator/kernel.h"

#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "tools/cuda_emulator/device.h"
#include "tools/cuda_emulator/emulator.h"

namespace alloy::emulator {
namespace {

namespace context = boost::context;

constexpr unsigned int kWarpSize = 32;

// A CUDA thread's stack. Kernels keep a few scalars and small arrays; 64 KiB leaves room for
// the std::function and library frames around them (4x that for ASan's larger frames). Only
// the pages a thread touches cost memory.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kStackBytes = 256 * 1024;
#else
constexpr std::size_t kStackBytes = 64 * 1024;
#endif

// Fiber stacks, each mapped once with a guard page below it (an overflow faults instead of
// corrupting a neighbour) and reused by every later block and launch on this OS thread.
class StackPool {
 public:
  StackPool() : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {}
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool() {
    for (void* mapping : mappings_)
      munmap(mapping, page_ + kStackBytes);
  }

  context::stack_context take() {
    if (free_.empty()) map_stack();
    const context::stack_context stack = free_.back();
    free_.pop_back();
    return stack;
  }

  // Never allocates: free_ has room for every stack (map_stack reserves it).
  void give_back(const context::stack_context& stack) noexcept { free_.push_back(stack); }

 private:
  void map_stack() {
    mappings_.reserve(mappings_.size() + 1);
    free_.reserve(mappings_.size() + 1);
    void* mapping = mmap(nullptr, page_ + kStackBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) {
      throw std::system_error(errno, std::generic_category(),
                              "cuda emulator: mapping a fiber stack");
    }
    if (mprotect(mapping, page_, PROT_NONE) != 0) {
      const int error = errno;
      munmap(mapping, page_ + kStackBytes);
      throw std::system_error(error, std::generic_category(),
                              "cuda emulator: protecting a fiber stack's guard page");
    }
    mappings_.push_back(mapping);
    context::stack_context stack;
    stack.size = kStackBytes;
    stack.sp = static_cast<char*>(mapping) + page_ + kStackBytes;  // stacks grow down
    free_.push_back(stack);
  }

  std::size_t page_;
  std::vector<void*> mappings_;
  std::vector<context::stack_context> free_;
};

// Boost.Context's stack allocator for a fiber on a pool stack: the fiber's end gives it back.
class PooledStack {
 public:
  explicit PooledStack(StackPool& pool) : pool_(&pool) {}
  void deallocate(context::stack_context& stack) noexcept { pool_->give_back(stack); }

 private:
  StackPool* pool_;
};

// ASan tracks which stack the OS thread runs on: every switch between the scheduler's stack
// and a fiber's is announced (start) and completed (finish), or ASan's stack checks, and any
// exception thrown on a fiber, go wrong. Without ASan these do nothing.
struct StackBounds {
  const void* bottom = nullptr;
  std::size_t size = 0;
};

StackBounds bounds_of(const context::stack_context& stack) {
  return {static_cast<const char*>(stack.sp) - stack.size, stack.size};
}

// `fake_stack` null: the fiber switching away ends.
void start_switch([[maybe_unused]] void** fake_stack, [[maybe_unused]] const StackBounds& to) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, to.bottom, to.size);
#endif
}

// `from`, unless null, learns the bounds of the stack switched away from.
void finish_switch([[maybe_unused]] void* fake_stack, [[maybe_unused]] StackBounds* from) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, from == nullptr ? nullptr : &from->bottom,
                                  from == nullptr ? nullptr : &from->size);
#endif
}

// ready: not started yet, running, or released and waiting for its turn.
enum class State : unsigned char { ready, barrier, warp, returned };

struct Thread {
  uint3 index{};
  State state = State::ready;
  context::fiber fiber;  // the worker that runs this thread, while it is suspended
  StackBounds stack;     // that worker's stack
  Barrier barrier = Barrier::sync;
  int predicate = 0;  // the thread's; after the release, the block's OR
  WarpCollective collective = WarpCollective::shuffle_down;
  unsigned int mask = 0;
  unsigned int source = 0;  // the lane a shuffle reads
  unsigned int size = 0;
  std::uint64_t bits = 0;          // the value posted; after the release, the result
  const WarpTask* task = nullptr;  // a warp task's, else null (a shuffle, ballot or sync)
  const WarpTaskPart* part = nullptr;
};

const char* name_of(Barrier barrier) {
  return barrier == Barrier::sync ? "__syncthreads" : "__syncthreads_or";
}

const char* name_of(WarpCollective collective) {
  switch (collective) {
    case WarpCollective::shuffle_down:
      return "__shfl_down_sync";
    case WarpCollective::shuffle_xor:
      return "__shfl_xor_sync";
    case WarpCollective::ballot:
      return "__ballot_sync";
    default:
      return "__syncwarp";
  }
}

std::string hex(unsigned int mask) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", mask);
  return text;
}

// The warp call that `thread` waits at, for fault messages.
std::string call_of(const Thread& thread) {
  if (thread.task != nullptr) return thread.task->name;
  return std::string(name_of(thread.collective)) + " with mask " + hex(thread.mask);
}

// "0-15, 17, 20-31" for ascending numbers.
std::string ranges(const std::vector<unsigned int>& numbers) {
  std::string text;
  for (std::size_t i = 0; i < numbers.size();) {
    std::size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1)
      ++j;
    if (!text.empty()) text += ", ";
    text += std::to_string(numbers[i]);
    if (j > i) text += "-" + std::to_string(numbers[j]);
    i = j + 1;
  }
  return text;
}

// "lanes 16-31" or "lane 5".
std::string counted(const char* noun, const std::vector<unsigned int>& numbers) {
  return std::string(noun) + (numbers.size() == 1 ? " " : "s ") + ranges(numbers);
}

// Groups numbers by a description, in the order the descriptions first appear:
// "lanes 16-31 had returned; lane 5 waiting at __syncthreads".
class Reasons {
 public:
  void add(const std::string& reason, unsigned int number) {
    for (auto& [text, numbers] : groups_) {
      if (text == reason) {
        numbers.push_back(number);
        return;
      }
    }
    groups_.push_back({reason, {number}});
  }

  std::string text(const char* noun) const {
    std::string result;
    for (const auto& [reason, numbers] : groups_) {
      if (!result.empty()) result += "; ";
      result += counted(noun, numbers) + " " + reason;
    }
    return result;
  }

 private:
  std::vector<std::pair<std::string, std::vector<unsigned int>>> groups_;
};

class Engine;
thread_local Engine* running = nullptr;  // the engine running a grid on this OS thread

class Engine {
 public:
  void run(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body);

  const uint3& thread_index() const { return current_->index; }
  const uint3& block_index() const { return block_index_; }
  const dim3& block_dim() const { return block_; }
  const dim3& grid_dim() const { return grid_; }
  int barrier(Barrier barrier, int predicate);
  std::uint64_t warp(WarpCollective collective, unsigned int mask, std::uint64_t bits,
                     unsigned int size, unsigned int operand, int width);
  void task(const WarpTask& task, const WarpTaskPart& part);

 private:
  // Unwinds the threads that a fault leaves suspended, however run_block ends.
  class SuspendedThreads {
   public:
    explicit SuspendedThreads(Engine& engine) : engine_(engine) {}
    SuspendedThreads(const SuspendedThreads&) = delete;
    SuspendedThreads& operator=(const SuspendedThreads&) = delete;
    ~SuspendedThreads() { engine_.unwind_suspended(); }

   private:
    Engine& engine_;
  };

  void run_block();
  context::fiber work(context::fiber&& scheduler);
  void start_worker();
  void resume(Thread& thread);
  void enter(context::fiber&& worker, const StackBounds& stack);
  void suspend();
  void unwind_suspended() noexcept;
  void make_runnable(Thread& thread);
  void resolve();
  bool release_warps();
  void run_task(Thread* warp, unsigned int index);
  void release_barrier();
  std::string stuck_warp() const;
  unsigned int id_of(const Thread& thread) const {
    return static_cast<unsigned int>(&thread - threads_.data());
  }
  bool joins(const Thread& lane, const Thread& leader) const {
    return lane.state == State::warp && lane.task == leader.task &&
           (leader.task != nullptr || (lane.collective == leader.collective &&
                                       lane.mask == leader.mask && lane.size == leader.size));
  }
  [[noreturn]] void fault(const std::string& what) const;
  [[noreturn]] void thread_fault(const std::string& what) const;

  StackPool pool_;
  std::vector<Thread> threads_;
  std::vector<unsigned int> runnable_;
  std::size_t runnable_head_ = 0;
  const char* kernel_ = nullptr;
  dim3 grid_;
  dim3 block_;
  uint3 block_index_{};
  const std::function<void()>* body_ = nullptr;
  unsigned int count_ = 0;     // threads per block
  unsigned int next_ = 0;      // the first thread not started
  unsigned int returned_ = 0;  // threads that have returned
  unsigned int at_barrier_ = 0;
  unsigned int at_warp_ = 0;
  Thread* current_ = nullptr;  // the thread running, or last suspended
  context::fiber scheduler_;   // the scheduler, while a worker runs
  StackBounds scheduler_stack_;
  std::exception_ptr error_;  // the first exception of a thread body
};

Engine& running_engine() {
  if (running == nullptr) {
    throw std::logic_error("cuda emulator: a device builtin was called outside a kernel");
  }
  return *running;
}

void Engine::run(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body) {
  kernel_ = kernel;
  grid_ = grid;
  block_ = block;
  body_ = &body;
  error_ = nullptr;
  count_ = block.x * block.y * block.z;
  threads_.resize(count_);
  for (unsigned int id = 0; id < count_; ++id) {
    threads_[id].index = {id % block.x, id / block.x % block.y, id / (block.x * block.y)};
  }
  for (unsigned int z = 0; z < grid.z; ++z) {
    for (unsigned int y = 0; y < grid.y; ++y) {
      for (unsigned int x = 0; x < grid.x; ++x) {
        block_index_ = {x, y, z};
        run_block();
      }
    }
  }
}

void Engine::run_block() {
  for (Thread& thread : threads_)
    thread.state = State::ready;
  next_ = returned_ = at_barrier_ = at_warp_ = 0;
  runnable_.clear();
  runnable_head_ = 0;
  const SuspendedThreads suspended(*this);
  while (!error_) {
    if (runnable_head_ < runnable_.size()) {
      resume(threads_[runnable_[runnable_head_++]]);
    } else if (next_ < count_) {
      start_worker();
    } else if (returned_ == count_) {
      return;
    } else {
      runnable_.clear();  // all run: a loop of barriers must not grow it
      runnable_head_ = 0;
      resolve();
    }
  }
  std::rethrow_exception(std::exchange(error_, nullptr));
}

// A worker's body: runs threads not started yet, one after another, until none is left. A
// thread that suspends takes the worker with it; when it is resumed and returns, its worker
// goes on with the threads still not started, if any.
context::fiber Engine::work(context::fiber&& scheduler) {
  finish_switch(nullptr, &scheduler_stack_);
  scheduler_ = std::move(scheduler);
  while (!error_ && next_ < count_) {
    Thread& thread = threads_[next_++];
    current_ = &thread;
    try {
      (*body_)();
    } catch (const context::detail::forced_unwind&) {
      // The fiber's destructor unwinding a suspended thread: the fiber ends.
      start_switch(nullptr, scheduler_stack_);
      throw;
    } catch (...) {
      error_ = std::current_exception();  // rethrown by run_block, outside the fibers
    }
    thread.state = State::returned;
    ++returned_;
  }
  start_switch(nullptr, scheduler_stack_);
  return std::move(scheduler_);
}

void Engine::start_worker() {
  const context::stack_context stack = pool_.take();
  enter(context::fiber(std::allocator_arg, context::preallocated(stack.sp, stack.size, stack),
                       PooledStack(pool_),
                       [this](context::fiber&& scheduler) { return work(std::move(scheduler)); }),
        bounds_of(stack));
}

void Engine::resume(Thread& thread) {
  current_ = &thread;
  enter(std::move(thread.fiber), thread.stack);
}

// Runs a worker until it suspends (current_ is then the thread it suspended in) or ends.
void Engine::enter(context::fiber&& worker, const StackBounds& stack) {
  void* fake_stack = nullptr;
  start_switch(&fake_stack, stack);
  context::fiber suspended = std::move(worker).resume();
  finish_switch(fake_stack, nullptr);
  if (suspended) {
    current_->fiber = std::move(suspended);
    current_->stack = stack;
  }
}

// On a worker: back to the scheduler until the thread is released.
void Engine::suspend() {
  void* fake_stack = nullptr;
  start_switch(&fake_stack, scheduler_stack_);
  try {
    scheduler_ = std::move(scheduler_).resume();
  } catch (const context::detail::forced_unwind&) {
    finish_switch(fake_stack, &scheduler_stack_);  // resumed to be unwound
    throw;
  }
  finish_switch(fake_stack, &scheduler_stack_);
}

// A fiber's destructor unwinds its thread's stack (the kernel's destructors run) and gives
// the stack back to the pool.
void Engine::unwind_suspended() noexcept {
  for (Thread& thread : threads_) {
    if (!thread.fiber) continue;
    void* fake_stack = nullptr;
    start_switch(&fake_stack, thread.stack);
    thread.fiber = context::fiber();
    finish_switch(fake_stack, nullptr);
  }
}

void Engine::make_runnable(Thread& thread) {
  thread.state = State::ready;
  runnable_.push_back(id_of(thread));
}

int Engine::barrier(Barrier barrier, int predicate) {
  Thread& thread = *current_;
  thread.state = State::barrier;
  thread.barrier = barrier;
  thread.predicate = predicate;
  ++at_barrier_;
  suspend();
  return thread.predicate;
}

std::uint64_t Engine::warp(WarpCollective collective, unsigned int mask, std::uint64_t bits,
                           unsigned int size, unsigned int operand, int width) {
  Thread& thread = *current_;
  const unsigned int id = id_of(thread);
  const unsigned int lane = id % kWarpSize;
  const unsigned int lanes = std::min(kWarpSize, count_ - id / kWarpSize * kWarpSize);
  const unsigned int existing = lanes == kWarpSize ? ~0u : (1u << lanes) - 1;
  const auto call = [&] { return std::string(name_of(collective)) + " with mask " + hex(mask); };
  if ((mask >> lane & 1) == 0) {
    thread_fault(call() + " leaves out the calling lane " + std::to_string(lane));
  }
  if ((mask & ~existing) != 0) {
    thread_fault(call() + " names lanes " + std::to_string(lanes) + "-31 of warp " +
                 std::to_string(id / kWarpSize) + ", which has only " + std::to_string(lanes) +
                 " (the block has " + std::to_string(count_) + " threads)");
  }
  if (width <= 0 || width > static_cast<int>(kWarpSize) || (width & (width - 1)) != 0) {
    thread_fault(call() + ": width " + std::to_string(width) + " is not a power of two up to 32");
  }
  const unsigned int segment = static_cast<unsigned int>(width);
  const unsigned int segment_end = (lane / segment + 1) * segment;
  thread.source = lane;  // out of range (and a ballot): the lane keeps its own value
  if (collective == WarpCollective::shuffle_down &&
      lane % segment + std::uint64_t{operand} < segment) {
    thread.source = lane + operand;
  } else if (collective == WarpCollective::shuffle_xor && (lane ^ operand) < segment_end) {
    thread.source = lane ^ operand;
  }
  thread.state = State::warp;
  thread.collective = collective;
  thread.mask = mask;
  thread.size = size;
  thread.bits = bits;
  thread.task = nullptr;
  ++at_warp_;
  suspend();
  return thread.bits;
}

void Engine::task(const WarpTask& task, const WarpTaskPart& part) {
  Thread& thread = *current_;
  const unsigned int id = id_of(thread);
  const unsigned int lanes = std::min(kWarpSize, count_ - id / kWarpSize * kWarpSize);
  if (lanes < kWarpSize) {
    thread_fault(std::string(task.name) + " needs all 32 lanes of a warp, and warp " +
                 std::to_string(id / kWarpSize) + " has only " + std::to_string(lanes) +
                 " (the block has " + std::to_string(count_) + " threads)");
  }
  thread.state = State::warp;
  thread.mask = ~0u;
  thread.task = &task;
  thread.part = &part;
  ++at_warp_;
  suspend();
}

// Nothing can run: every thread not returned waits at a barrier or a warp collective.
void Engine::resolve() {
  if (at_warp_ > 0) {
    if (!release_warps()) fault(stuck_warp());
    return;
  }
  release_barrier();
}

// Releases every warp collective whose lanes have all arrived; returns whether there was one.
bool Engine::release_warps() {
  bool released = false;
  for (unsigned int first = 0; first < count_; first += kWarpSize) {
    const unsigned int lanes = std::min(kWarpSize, count_ - first);
    Thread* const warp = &threads_[first];
    unsigned int pending = 0;
    for (unsigned int lane = 0; lane < lanes; ++lane) {
      if (warp[lane].state == State::warp) pending |= 1u << lane;
    }
    while (pending != 0) {
      const Thread& leader = warp[__builtin_ctz(pending)];
      const unsigned int mask = leader.mask;
      bool complete = true;
      for (unsigned int lane = 0; lane < lanes && complete; ++lane) {
        complete = (mask >> lane & 1) == 0 || joins(warp[lane], leader);
      }
      if (!complete) {
        pending &= ~(1u << id_of(leader) % kWarpSize);
        continue;
      }
      pending &= ~mask;
      released = true;
      if (leader.task != nullptr) {
        run_task(warp, first / kWarpSize);
        continue;
      }
      // Every result is read before any is written: a lane's bits become its result.
      std::uint64_t posted[kWarpSize] = {};
      std::uint64_t ballot = 0;
      for (unsigned int lane = 0; lane < lanes; ++lane) {
        if ((mask >> lane & 1) == 0) continue;
        posted[lane] = warp[lane].bits;
        if (warp[lane].bits != 0) ballot |= 1u << lane;
      }
      const bool is_ballot = leader.collective == WarpCollective::ballot;
      for (unsigned int lane = 0; lane < lanes; ++lane) {
        if ((mask >> lane & 1) == 0) continue;
        Thread& thread = warp[lane];
        if ((mask >> thread.source & 1) == 0) {
          fault(std::string(name_of(thread.collective)) + " with mask " + hex(mask) + " in warp " +
                std::to_string(first / kWarpSize) + ": lane " + std::to_string(lane) +
                " reads lane " + std::to_string(thread.source) + ", which the mask leaves out");
        }
        thread.bits = is_ballot ? ballot : posted[thread.source];
        make_runnable(thread);
        --at_warp_;
      }
    }
  }
  return released;
}

// Every lane of the warp waits at the same task: runs it once, if their uniform arguments agree.
void Engine::run_task(Thread* warp, unsigned int index) {
  const WarpTask& task = *warp[0].task;
  const WarpTaskPart* parts[kWarpSize];
  bool uniform = true;
  for (unsigned int lane = 0; lane < kWarpSize; ++lane) {
    parts[lane] = warp[lane].part;
    uniform = uniform &&
              std::memcmp(parts[lane]->uniform, parts[0]->uniform, sizeof parts[0]->uniform) == 0;
  }
  const std::string call = std::string(task.name) + " in warp " + std::to_string(index);
  if (!uniform) {
    Reasons arguments;
    for (unsigned int lane = 0; lane < kWarpSize; ++lane)
      arguments.add(task.describe(*parts[lane]), lane);
    fault(call + " with different arguments: " + arguments.text("lane"));
  }
  try {
    task.run(parts);
  } catch (const std::invalid_argument& error) {
    fault(call + ": " + error.what());
  }
  for (unsigned int lane = 0; lane < kWarpSize; ++lane) {
    make_runnable(warp[lane]);
    --at_warp_;
  }
}

// Why the first lane waiting at a warp collective cannot go on.
std::string Engine::stuck_warp() const {
  const Thread* leader = nullptr;
  for (const Thread& thread : threads_) {
    if (thread.state == State::warp) {
      leader = &thread;
      break;
    }
  }
  const unsigned int first = id_of(*leader) / kWarpSize * kWarpSize;
  std::vector<unsigned int> joined;
  Reasons missing;
  for (unsigned int lane = 0; lane < kWarpSize; ++lane) {
    if ((leader->mask >> lane & 1) == 0) continue;
    const Thread& thread = threads_[first + lane];
    if (joins(thread, *leader)) {
      joined.push_back(lane);
    } else if (thread.state == State::returned) {
      missing.add("had returned", lane);
    } else if (thread.state == State::barrier) {
      missing.add(std::string("waiting at ") + name_of(thread.barrier), lane);
    } else if (thread.task != leader->task || thread.collective != leader->collective ||
               thread.mask != leader->mask) {
      missing.add("waiting at " + call_of(thread), lane);
    } else {
      missing.add("exchanging a " + std::to_string(thread.size) + "-byte value, not " +
                      std::to_string(leader->size),
                  lane);
    }
  }
  return call_of(*leader) + " in warp " + std::to_string(first / kWarpSize) + " reached by " +
         counted("lane", joined) + "; " + missing.text("lane");
}

// Every thread not returned waits at a barrier: releases the block if none has returned and
// all wait at the same kind of barrier.
void Engine::release_barrier() {
  const Thread* waiting = &threads_[0];
  while (waiting->state != State::barrier)
    ++waiting;
  if (returned_ > 0) {
    std::vector<unsigned int> gone;
    for (unsigned int id = 0; id < count_; ++id) {
      if (threads_[id].state == State::returned) gone.push_back(id);
    }
    fault(std::string(name_of(waiting->barrier)) + " reached by " + std::to_string(at_barrier_) +
          " of " + std::to_string(count_) + " threads; " + counted("thread", gone) +
          " had returned");
  }
  int any = 0;
  for (const Thread& thread : threads_) {
    if (thread.barrier != waiting->barrier) {
      Reasons kinds;
      for (unsigned int id = 0; id < count_; ++id) {
        kinds.add(std::string("waiting at ") + name_of(threads_[id].barrier), id);
      }
      fault("mixed barriers: " + kinds.text("thread"));
    }
    any |= thread.predicate != 0;
  }
  for (Thread& thread : threads_) {
    thread.predicate = any;
    make_runnable(thread);
  }
  at_barrier_ = 0;
}

void Engine::fault(const std::string& what) const {
  throw DeviceFault("kernel " + std::string(kernel_) + ", block (" +
                    std::to_string(block_index_.x) + "," + std::to_string(block_index_.y) + "," +
                    std::to_string(block_index_.z) + "): " + what);
}

void Engine::thread_fault(const std::string& what) const {
  const uint3& index = current_->index;
  fault("thread " + std::to_string(id_of(*current_)) + " (" + std::to_string(index.x) + "," +
        std::to_string(index.y) + "," + std::to_string(index.z) + "): " + what);
}

}  // namespace

const uint3& current_thread_index() {
  return running_engine().thread_index();
}
const uint3& current_block_index() {
  return running_engine().block_index();
}
const dim3& current_block_dim() {
  return running_engine().block_dim();
}
const dim3& current_grid_dim() {
  return running_engine().grid_dim();
}

int block_barrier(Barrier barrier, int predicate) {
  return running_engine().barrier(barrier, predicate);
}

std::uint64_t warp_collective(WarpCollective collective, unsigned int mask, std::uint64_t bits,
                              unsigned int size, unsigned int operand, int width) {
  return running_engine().warp(collective, mask, bits, size, operand, width);
}

void warp_task(const WarpTask& task, const WarpTaskPart& part) {
  running_engine().task(task, part);
}

cudaError_t check_launch_configuration(dim3 grid, dim3 block, std::size_t dynamic_shared) {
  // An sm_90 device's limits. The emulator has no dynamic shared memory (__shared__ is a
  // static), and the project uses none.
  const bool empty =
      grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0;
  const bool too_large = grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 ||
                         block.x > 1024 || block.y > 1024 || block.z > 64 ||
                         std::uint64_t{block.x} * block.y * block.z > 1024;
  return empty || too_large || dynamic_shared != 0 ? cudaErrorInvalidConfiguration : cudaSuccess;
}

void run_grid(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& thread_body) {
  if (check_launch_configuration(grid, block, 0) != cudaSuccess) {
    throw std::invalid_argument(
        "cuda emulator: kernel " + std::string(kernel) + " launched with grid (" +
        std::to_string(grid.x) + "," + std::to_string(grid.y) + "," + std::to_string(grid.z) +
        ") and block (" + std::to_string(block.x) + "," + std::to_string(block.y) + "," +
        std::to_string(block.z) + "), which no GPU runs");
  }
  if (running != nullptr) {
    throw std::logic_error("cuda emulator: kernel " + std::string(kernel) +
                           " launched from inside a kernel");
  }
  static thread_local Engine engine;
  // Clears `running` however the grid ends.
  struct Running {
    explicit Running(Engine& engine) { running = &engine; }
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;
    ~Running() { running = nullptr; }
  } const current(engine);
  engine.run(kernel, grid, block, thread_body);
}

}  // namespace alloy::emulator
