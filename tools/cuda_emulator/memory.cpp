// Device and pinned host memory. Every device allocation is a mapping of its own that ends
// right before an inaccessible guard page, so overruns fault; device memory is inaccessible
// to the host except while the runtime runs stream work, and a fault handler turns the host's
// touch of device memory into one clear line and an abort.
//
// Where the CPU has memory protection keys, one key tags every device allocation and the
// thread that runs stream work opens them all with one register write (pkey_set); elsewhere
// each allocation is opened and closed with mprotect, whose cost grows with the allocations.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "tools/cuda_emulator/runtime.h"

namespace alloy::emulator {

namespace {

constexpr std::size_t kAlignment = 256;  // what cudaMalloc guarantees
// Device allocations alive at once; the fault handler scans them without locking.
constexpr std::size_t kMaxAllocations = std::size_t{1} << 16;

std::size_t round_up(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// What a device has left for allocations: its memory less its context and live allocations.
std::size_t free_memory(const DeviceState& state) {
  return config().memory - config().context_bytes() - state.allocated;
}

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// One device allocation's mapping: [base, base + data_bytes) holds the allocation (which ends
// at its end), then one guard page.
struct Mapping {
  Allocation allocation;
  char* base = nullptr;
  std::size_t data_bytes = 0;
  std::size_t slot = 0;
};

// What the fault handler reads: written under the runtime's mutex, read lock-free (a slot is
// in use while its base is not 0; base is written last and cleared first).
struct Slot {
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::uintptr_t> end{0};  // of the guard page
  std::atomic<std::uintptr_t> start{0};
  std::atomic<std::size_t> bytes{0};
  std::atomic<int> device{0};
};

Slot slots[kMaxAllocations];
// Whether this thread runs stream work with device memory open: the fault handler's blame.
thread_local bool open_here = false;

// The protection key of device memory, or -1 where there are none (or the fallback is asked
// for: Config::mprotect). pkey_alloc closes the key on the calling thread; threads start with
// every key but the default one closed.
int device_key() {
  static const int key = config().mprotect ? -1 : pkey_alloc(0, PKEY_DISABLE_ACCESS);
  return key;
}

// Under the runtime's mutex.
std::map<std::uintptr_t, Mapping>& mappings() {  // by base
  static auto* const instance = new std::map<std::uintptr_t, Mapping>;
  return *instance;
}
std::map<std::uintptr_t, std::size_t>& pinned() {  // start -> bytes
  static auto* const instance = new std::map<std::uintptr_t, std::size_t>;
  return *instance;
}
std::vector<std::size_t> free_slots;
std::size_t slots_taken = 0;  // slots [0, slots_taken) were used at least once

// A free slot's index, or kMaxAllocations when all are in use.
std::size_t take_slot() {
  if (!free_slots.empty()) {
    const std::size_t slot = free_slots.back();
    free_slots.pop_back();
    return slot;
  }
  return slots_taken < kMaxAllocations ? slots_taken++ : kMaxAllocations;
}

struct sigaction previous_segv;
struct sigaction previous_bus;

void on_fault(int signal, siginfo_t* info, void* context);

void install_handler(int signal, struct sigaction* previous) {
  struct sigaction current;
  if (sigaction(signal, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_fault) return;
  struct sigaction handler;
  std::memset(&handler, 0, sizeof handler);
  handler.sa_sigaction = on_fault;
  handler.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&handler.sa_mask);
  if (sigaction(signal, &handler, previous) != 0) *previous = current;
}

// Called at every allocation and whenever device memory is protected again: test frameworks
// (Boost.Test) install their own handlers around each test, over ours.
void ensure_fault_handler() {
  install_handler(SIGSEGV, &previous_segv);
  install_handler(SIGBUS, &previous_bus);
}

void chain(int signal, siginfo_t* info, void* context) {
  const struct sigaction& previous = signal == SIGBUS ? previous_bus : previous_segv;
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(signal, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
  } else {
    // Returning re-executes the faulting access, which now gets the default action.
    ::signal(signal, SIG_DFL);
  }
}

void on_fault(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (const Slot& slot : slots) {
    const std::uintptr_t base = slot.base.load(std::memory_order_acquire);
    if (base == 0 || address < base || address >= slot.end.load()) continue;
    const std::uintptr_t start = slot.start.load();
    const std::size_t bytes = slot.bytes.load();
    const bool host = !open_here;
    char line[320];
    if (address >= start + bytes) {
      std::snprintf(line, sizeof line,
                    "alloy CUDA emulator: %s touched device memory at 0x%" PRIxPTR
                    ", %zu bytes past the end of an allocation of %zu bytes on device %d%s\n",
                    host ? "host code" : "stream work", address,
                    static_cast<std::size_t>(address - start - bytes), bytes, slot.device.load(),
                    host ? "" : " (kernel or library overrun)");
    } else if (address >= start) {
      std::snprintf(line, sizeof line,
                    "alloy CUDA emulator: host code touched device memory at 0x%" PRIxPTR
                    ", %zu bytes into an allocation of %zu bytes on device %d\n",
                    address, static_cast<std::size_t>(address - start), bytes, slot.device.load());
    } else {
      std::snprintf(line, sizeof line,
                    "alloy CUDA emulator: %s touched device memory at 0x%" PRIxPTR
                    ", %zu bytes before an allocation of %zu bytes on device %d\n",
                    host ? "host code" : "stream work", address,
                    static_cast<std::size_t>(start - address), bytes, slot.device.load());
    }
    const ssize_t written = write(STDERR_FILENO, line, std::strlen(line));
    static_cast<void>(written);
    // The process must end here: a test framework's SIGABRT handler would carry on with the
    // runtime's lock held and device memory in any state.
    ::signal(SIGABRT, SIG_DFL);
    std::abort();
  }
  chain(signal, info, context);
}

void protect(const Mapping& mapping, bool access) {
  if (mprotect(mapping.base, mapping.data_bytes, access ? PROT_READ | PROT_WRITE : PROT_NONE) !=
      0) {
    std::fprintf(stderr, "alloy CUDA emulator: mprotect of a %zu-byte device mapping failed: %s\n",
                 mapping.data_bytes, std::strerror(errno));
    std::abort();
  }
}

const Mapping* mapping_at(const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto found = mappings().upper_bound(address);
  if (found == mappings().begin()) return nullptr;
  --found;
  const Mapping& mapping = found->second;
  if (address >= found->first + mapping.data_bytes + page_size()) return nullptr;
  return &mapping;
}

}  // namespace

const Allocation* find_allocation(const void* pointer, std::size_t bytes) {
  const auto lock = lock_runtime();
  const Mapping* mapping = mapping_at(pointer);
  if (mapping == nullptr) return nullptr;
  const Allocation& allocation = mapping->allocation;
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  const auto start = reinterpret_cast<std::uintptr_t>(allocation.start);
  if (address < start) return nullptr;
  const std::size_t offset = address - start;
  if (bytes == 0) return offset <= allocation.bytes ? &allocation : nullptr;
  return offset < allocation.bytes && bytes <= allocation.bytes - offset ? &allocation : nullptr;
}

bool touches_device_memory(const void* pointer, std::size_t bytes) {
  const auto lock = lock_runtime();
  const auto first = reinterpret_cast<std::uintptr_t>(pointer);
  const std::uintptr_t last = first + (bytes == 0 ? 0 : bytes - 1);
  auto it = mappings().upper_bound(first);
  if (it != mappings().begin()) --it;
  for (; it != mappings().end() && it->first <= last; ++it) {
    if (it->first + it->second.data_bytes + page_size() > first) return true;
  }
  return false;
}

bool is_pinned(const void* pointer, std::size_t bytes) {
  const auto lock = lock_runtime();
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto found = pinned().upper_bound(address);
  if (found == pinned().begin()) return false;
  --found;
  return address - found->first < found->second &&
         bytes <= found->second - (address - found->first);
}

void set_device_memory_access(bool access) {
  const auto lock = lock_runtime();
  if (open_here == access) return;
  if (const int key = device_key(); key >= 0) {
    if (pkey_set(key, access ? 0 : PKEY_DISABLE_ACCESS) != 0) {
      std::fprintf(stderr, "alloy CUDA emulator: pkey_set of device memory's key %d failed: %s\n",
                   key, std::strerror(errno));
      std::abort();
    }
  } else {
    for (const auto& [base, mapping] : mappings())
      protect(mapping, access);
  }
  open_here = access;
  if (!access) ensure_fault_handler();
}

bool is_device_range(const void* pointer, std::size_t bytes) {
  const auto lock = lock_runtime();
  const Allocation* allocation = find_allocation(pointer, bytes);
  return allocation != nullptr && allocation->device == this_thread().device;
}

void require_device_range(const void* pointer, std::size_t bytes, const std::string& what) {
  if (is_device_range(pointer, bytes)) return;
  char detail[160];
  std::snprintf(detail, sizeof detail, " (%zu bytes at %p) is not memory of device %d", bytes,
                pointer, this_thread().device);
  throw DeviceFault(what + detail, cudaErrorIllegalAddress);
}

}  // namespace alloy::emulator

using namespace alloy::emulator;

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  const auto lock = lock_runtime();
  if (pointer == nullptr) return fail(cudaErrorInvalidValue);
  if (const cudaError_t refused = check_unsafe_call()) return fail(refused);
  const int device = this_thread().device;
  if (const cudaError_t sticky = device_error(device)) return fail(sticky);
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  DeviceState& state = runtime().devices[static_cast<std::size_t>(device)];
  const std::size_t accounted = round_up(bytes, kAlignment);
  if (accounted > free_memory(state)) return fail(cudaErrorMemoryAllocation);
  Mapping mapping;
  mapping.slot = take_slot();
  if (mapping.slot == kMaxAllocations) return fail(cudaErrorMemoryAllocation);
  mapping.data_bytes = round_up(bytes, page_size());
  void* base = mmap(nullptr, mapping.data_bytes + page_size(), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    free_slots.push_back(mapping.slot);
    return fail(cudaErrorMemoryAllocation);
  }
  mapping.base = static_cast<char*>(base);
  mapping.allocation.start = mapping.base + mapping.data_bytes - accounted;
  mapping.allocation.bytes = bytes;
  mapping.allocation.device = device;
  // NaN floats and -1 integers: reads of memory nothing wrote show.
  std::memset(mapping.allocation.start, 0xFF, bytes);
  // The guard page, and the data under device memory's key (after the fill, which the key
  // would refuse this thread).
  const int key = device_key();
  if (mprotect(mapping.base + mapping.data_bytes, page_size(), PROT_NONE) != 0 ||
      (key >= 0 &&
       pkey_mprotect(mapping.base, mapping.data_bytes, PROT_READ | PROT_WRITE, key) != 0)) {
    munmap(base, mapping.data_bytes + page_size());
    free_slots.push_back(mapping.slot);
    return fail(cudaErrorMemoryAllocation);
  }
  if (key < 0 && !open_here) protect(mapping, false);
  ensure_fault_handler();

  Slot& entry = slots[mapping.slot];
  entry.end.store(reinterpret_cast<std::uintptr_t>(mapping.base) + mapping.data_bytes +
                  page_size());
  entry.start.store(reinterpret_cast<std::uintptr_t>(mapping.allocation.start));
  entry.bytes.store(bytes);
  entry.device.store(device);
  entry.base.store(reinterpret_cast<std::uintptr_t>(mapping.base), std::memory_order_release);

  state.allocated += accounted;
  mappings().emplace(reinterpret_cast<std::uintptr_t>(mapping.base), mapping);
  *pointer = mapping.allocation.start;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  const auto lock = lock_runtime();
  if (const cudaError_t refused = check_unsafe_call()) return fail(refused);
  if (pointer == nullptr) return cudaSuccess;
  const Mapping* found = mapping_at(pointer);
  if (found == nullptr || found->allocation.start != pointer) return fail(cudaErrorInvalidValue);
  // As CUDA does: no queued work may still use the memory.
  synchronize_all_devices();
  const Mapping mapping = *found;
  slots[mapping.slot].base.store(0, std::memory_order_release);
  free_slots.push_back(mapping.slot);
  mappings().erase(reinterpret_cast<std::uintptr_t>(mapping.base));
  munmap(mapping.base, mapping.data_bytes + page_size());
  runtime().devices[static_cast<std::size_t>(mapping.allocation.device)].allocated -=
      round_up(mapping.allocation.bytes, kAlignment);
  return fail(device_error(this_thread().device));
}

cudaError_t cudaHostAlloc(void** pointer, std::size_t bytes, unsigned flags) {
  const auto lock = lock_runtime();
  if (pointer == nullptr) return fail(cudaErrorInvalidValue);
  constexpr unsigned kKnownFlags =
      cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if ((flags & ~kKnownFlags) != 0) return fail(cudaErrorInvalidValue);
  if (const cudaError_t sticky = device_error(this_thread().device)) return fail(sticky);
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* memory = mmap(nullptr, round_up(bytes, page_size()), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  std::memset(memory, 0xFF, bytes);  // as device memory: reads of unwritten bytes show
  pinned().emplace(reinterpret_cast<std::uintptr_t>(memory), bytes);
  *pointer = memory;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, std::size_t bytes) {
  return cudaHostAlloc(pointer, bytes, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* pointer) {
  const auto lock = lock_runtime();
  if (const cudaError_t refused = check_unsafe_call()) return fail(refused);
  if (pointer == nullptr) return cudaSuccess;
  const auto found = pinned().find(reinterpret_cast<std::uintptr_t>(pointer));
  if (found == pinned().end()) return fail(cudaErrorInvalidValue);
  // As CUDA does: queued copies may still read or write the buffer.
  synchronize_all_devices();
  munmap(pointer, round_up(found->second, page_size()));
  pinned().erase(found);
  return fail(device_error(this_thread().device));
}

cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  const auto lock = lock_runtime();
  if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue);
  const int device = this_thread().device;
  if (const cudaError_t sticky = device_error(device)) return fail(sticky);
  *total_bytes = config().memory;
  *free_bytes = free_memory(runtime().devices[static_cast<std::size_t>(device)]);
  return cudaSuccess;
}
