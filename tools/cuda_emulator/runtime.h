// The emulated CUDA runtime's shared state: devices, streams, events, captures and the calling
// thread's CUDA state, and the helpers the runtime's source files (memory.cpp, streams.cpp,
// events.cpp, copies.cpp, graphs.cpp, device_info.cpp, errors.cpp, launch.cpp) share. Nothing
// outside the runtime includes it; the emulated libraries use emulator.h.
//
// One recursive mutex guards all of it: every runtime call takes it, and stream work runs
// under it on the thread that waits for the work (the runtime has no threads of its own).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tools/cuda_emulator/emulator.h"

namespace alloy::emulator {

// What a piece of queued work does, for the memory protection: device work runs with device
// memory accessible, host functions with it protected (as a GPU's memory is to the host), and
// control items (event records, waits) touch no memory.
enum class WorkKind { device, host, control };

struct Item {
  Work work;
  WorkKind kind = WorkKind::device;
};

struct Capture;

// How far a capturing stream's work depends on each stream of its capture: for stream S,
// the number of S's nodes it has to come after. Used to check that every stream forked into a
// capture joined its origin again before the capture ends.
using CaptureClock = std::map<const ::CUstream_st*, std::size_t>;

}  // namespace alloy::emulator

// The opaque handle types of cuda_runtime_api.h, defined here and nowhere else.
struct CUstream_st {
  int device = 0;
  unsigned flags = 0;
  bool legacy = false;  // the device's legacy default stream (handle 0)
  // Work not run yet; items [done, issued) of the stream's history.
  std::deque<alloy::emulator::Item> queue;
  std::uint64_t issued = 0;
  std::uint64_t done = 0;
  // The capture this stream takes part in (began on it, or joined by waiting on an event
  // recorded in it); null when its work is queued.
  std::shared_ptr<alloy::emulator::Capture> capture;
};

struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
  // The stream and position of its latest record; expired once the stream was destroyed
  // (which ran the stream's work first).
  std::weak_ptr<CUstream_st> stream;
  std::uint64_t position = 0;
  std::uint64_t generation = 0;  // which record `executed_at` belongs to
  bool executed = false;
  std::chrono::steady_clock::time_point executed_at;
  // Set when the latest record was made in a capture: waits on it join the capture.
  std::weak_ptr<alloy::emulator::Capture> capture;
  alloy::emulator::CaptureClock clock;
};

struct CUgraphNode_st {
  alloy::emulator::Item item;
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};

struct CUgraphExec_st {
  std::vector<alloy::emulator::Item> nodes;
};

namespace alloy::emulator {

struct Capture {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;  // the thread that began it
  CUstream_st* origin = nullptr;
  std::unique_ptr<CUgraph_st> graph = std::make_unique<CUgraph_st>();
  bool invalidated = false;
  std::map<const CUstream_st*, CaptureClock> clocks;  // every stream taking part
};

struct DeviceState {
  std::shared_ptr<CUstream_st> legacy;
  std::size_t allocated = 0;  // bytes of live allocations
  // The fault that lost the device's context, cudaSuccess while none did.
  cudaError_t sticky = cudaSuccess;
};

struct Runtime {
  std::recursive_mutex mutex;
  std::vector<DeviceState> devices;
  std::unordered_map<const CUstream_st*, std::shared_ptr<CUstream_st>> streams;
  std::unordered_map<const CUevent_st*, std::shared_ptr<CUevent_st>> events;
  std::vector<std::shared_ptr<Capture>> captures;  // active ones
  std::unordered_map<const CUgraph_st*, std::unique_ptr<CUgraph_st>> graphs;
  std::unordered_map<const CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>> execs;
};

// The runtime, created at first use from the configuration (device_info.cpp).
Runtime& runtime();
std::unique_lock<std::recursive_mutex> lock_runtime();

// --- configuration (device_info.cpp) ---
struct Config {
  int devices = 1;
  std::size_t memory = std::size_t{8} << 30;  // per device
  // What the driver's context takes of each device's memory (about half a GiB on an H100),
  // so that cudaMemGetInfo never reports a device with nothing used: memory / 16, at most
  // 512 MiB.
  std::size_t context_bytes() const { return std::min(memory / 16, std::size_t{512} << 20); }
  // Device memory opened with mprotect per allocation even where the CPU has protection keys.
  bool mprotect = false;
};
// Read once from ALLOY_EMULATOR_DEVICES, ALLOY_EMULATOR_MEMORY and ALLOY_EMULATOR_MPROTECT; a
// bad value is a fatal configuration error (the message names the variable, then the process
// aborts).
const Config& config();
bool valid_device(int device);

// --- the calling thread's state (errors.cpp) ---
struct ThreadState {
  int device = 0;
  cudaError_t last_error = cudaSuccess;
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
};
ThreadState& this_thread();

// Records `status` as the calling thread's last error unless it is cudaSuccess; returns it.
cudaError_t fail(cudaError_t status);
// The sticky error of `device`'s lost context, or cudaSuccess.
cudaError_t device_error(int device);
// Makes `fault` the sticky error of `device`, prints it once, and drops the device's queued
// work (it can never run).
void lose_device(int device, const std::string& work, const DeviceFault& fault);

// --- streams (streams.cpp) ---
// The stream a handle names (0 and cudaStreamLegacy: the current device's legacy stream), or
// null for a handle that is no live stream.
CUstream_st* find_stream(cudaStream_t handle);
std::shared_ptr<CUstream_st> shared_stream(const CUstream_st& stream);
// Queues `item` on `stream`, or appends it to the stream's capture. Returns the error the
// runtime call reports.
cudaError_t enqueue_item(CUstream_st& stream, Item item);
// Runs `stream`'s work until `position` items have run (or its device is lost).
void run_until(CUstream_st& stream, std::uint64_t position);
void run_all(CUstream_st& stream);
// Work that makes its stream wait until each target has run to its position (a target
// destroyed meanwhile ran all its work first).
using WaitTarget = std::pair<std::weak_ptr<CUstream_st>, std::uint64_t>;
Item wait_item(std::vector<WaitTarget> targets);
// Runs every stream of `device` to its end; then returns the device's sticky error.
cudaError_t synchronize_device(int device);
cudaError_t synchronize_all_devices();

// --- graph capture (graphs.cpp) ---
// For a call that CUDA deems potentially unsafe during a capture (it may synchronise, or
// allocate outside the graph): cudaErrorStreamCaptureUnsupported when the calling thread's
// mode forbids it, after invalidating the captures that forbid it; else cudaSuccess.
cudaError_t check_unsafe_call();
// For a use of `device`'s legacy stream: cudaErrorStreamCaptureImplicit when a blocking stream
// of the device is capturing (the legacy stream would synchronise with it), after
// invalidating those captures.
cudaError_t check_legacy_use(int device);
void invalidate(Capture& capture);
// Appends a node (item) made on `stream`, a stream of `capture`.
void append_node(Capture& capture, const CUstream_st& stream, Item item);

// --- device memory (memory.cpp) ---
struct Allocation {
  char* start = nullptr;
  std::size_t bytes = 0;
  int device = 0;
};
// The live allocation holding [pointer, pointer + bytes) (bytes 0: holding pointer, or ending
// at it), or null.
const Allocation* find_allocation(const void* pointer, std::size_t bytes);
// Whether [pointer, pointer + bytes) overlaps any device allocation or its guard page.
bool touches_device_memory(const void* pointer, std::size_t bytes);
bool is_pinned(const void* pointer, std::size_t bytes);
// Makes every device allocation readable and writable (true) or inaccessible (false).
void set_device_memory_access(bool accessible);

}  // namespace alloy::emulator
