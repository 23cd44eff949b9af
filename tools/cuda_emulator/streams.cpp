// Streams: queues of work that run in order, deferred until the host could observe their
// completion (a synchronisation, a query, a blocking copy, a free). The legacy default stream
// orders against every blocking stream of its device, as CUDA's does.
#include <utility>

#include "tools/cuda_emulator/runtime.h"

namespace alloy::emulator {

namespace {

// Runs nested (a wait runs the stream it waits for): device memory is protected again when
// the outermost run ends.
int running_depth = 0;

class Running {
 public:
  Running() { ++running_depth; }
  ~Running() {
    if (--running_depth == 0) set_device_memory_access(false);
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;
};

// Makes `device` the calling thread's current device for the guard's lifetime: work may run
// on any thread that waits for it (a watchdog's query), and runs on its stream's device.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) : previous_(std::exchange(this_thread().device, device)) {}
  ~CurrentDevice() { this_thread().device = previous_; }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_;
};

void execute(CUstream_st& stream, Item& item) {
  if (item.kind != WorkKind::control) set_device_memory_access(item.kind == WorkKind::device);
  const CurrentDevice current(stream.device);
  try {
    item.work.run();
  } catch (const DeviceFault& fault) {
    lose_device(stream.device, item.work.name, fault);
  } catch (const std::exception& error) {
    lose_device(stream.device, item.work.name, DeviceFault(error.what()));
  }
}

bool pending(const CUstream_st& stream) {
  return stream.done < stream.issued;
}

void push(CUstream_st& stream, Item item) {
  stream.queue.push_back(std::move(item));
  ++stream.issued;
}

}  // namespace

Item wait_item(std::vector<WaitTarget> targets) {
  return Item{Work{"a stream wait",
                   [targets = std::move(targets)] {
                     for (const auto& [target, position] : targets) {
                       if (const auto stream = target.lock()) run_until(*stream, position);
                     }
                   }},
              WorkKind::control};
}

CUstream_st* find_stream(cudaStream_t handle) {
  Runtime& rt = runtime();
  if (handle == nullptr || handle == cudaStreamLegacy) {
    return rt.devices[static_cast<std::size_t>(this_thread().device)].legacy.get();
  }
  const auto found = rt.streams.find(handle);
  return found == rt.streams.end() ? nullptr : found->second.get();
}

std::shared_ptr<CUstream_st> shared_stream(const CUstream_st& stream) {
  Runtime& rt = runtime();
  if (stream.legacy) return rt.devices[static_cast<std::size_t>(stream.device)].legacy;
  return rt.streams.at(&stream);
}

cudaError_t enqueue_item(CUstream_st& stream, Item item) {
  Runtime& rt = runtime();
  if (const cudaError_t sticky = device_error(stream.device)) return sticky;
  if (stream.capture) {
    if (stream.capture->invalidated) return cudaErrorStreamCaptureInvalidated;
    append_node(*stream.capture, stream, std::move(item));
    return cudaSuccess;
  }
  CUstream_st& legacy = *rt.devices[static_cast<std::size_t>(stream.device)].legacy;
  if (stream.legacy) {
    if (const cudaError_t conflict = check_legacy_use(stream.device)) return conflict;
    std::vector<WaitTarget> targets;
    for (const auto& [handle, other] : rt.streams) {
      if (other->device == stream.device && (other->flags & cudaStreamNonBlocking) == 0 &&
          pending(*other)) {
        targets.emplace_back(other, other->issued);
      }
    }
    if (!targets.empty()) push(stream, wait_item(std::move(targets)));
  } else if ((stream.flags & cudaStreamNonBlocking) == 0 && pending(legacy)) {
    push(stream, wait_item({WaitTarget(shared_stream(legacy), legacy.issued)}));
  }
  push(stream, std::move(item));
  return cudaSuccess;
}

void run_until(CUstream_st& stream, std::uint64_t position) {
  const auto lock = lock_runtime();
  const Running running;
  while (stream.done < position && !stream.queue.empty()) {
    Item item = std::move(stream.queue.front());
    stream.queue.pop_front();
    ++stream.done;
    execute(stream, item);
  }
}

void run_all(CUstream_st& stream) {
  run_until(stream, stream.issued);
}

cudaError_t synchronize_device(int device) {
  Runtime& rt = runtime();
  run_all(*rt.devices[static_cast<std::size_t>(device)].legacy);
  for (const auto& [handle, stream] : rt.streams) {
    if (stream->device == device) run_all(*stream);
  }
  return device_error(device);
}

cudaError_t synchronize_all_devices() {
  cudaError_t first = cudaSuccess;
  for (int device = 0; device < config().devices; ++device) {
    const cudaError_t status = synchronize_device(device);
    if (first == cudaSuccess) first = status;
  }
  return first;
}

cudaError_t enqueue(cudaStream_t handle, Work work) {
  const auto lock = lock_runtime();
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return cudaErrorInvalidResourceHandle;
  return enqueue_item(*stream, Item{std::move(work), WorkKind::device});
}

}  // namespace alloy::emulator

using namespace alloy::emulator;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* handle, unsigned flags) {
  const auto lock = lock_runtime();
  if (handle == nullptr || (flags & ~cudaStreamNonBlocking) != 0) {
    return fail(cudaErrorInvalidValue);
  }
  const int device = this_thread().device;
  if (const cudaError_t sticky = device_error(device)) return fail(sticky);
  auto stream = std::make_shared<CUstream_st>();
  stream->device = device;
  stream->flags = flags;
  *handle = stream.get();
  runtime().streams.emplace(stream.get(), std::move(stream));
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* handle) {
  return cudaStreamCreateWithFlags(handle, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t handle) {
  const auto lock = lock_runtime();
  Runtime& rt = runtime();
  const auto found = rt.streams.find(handle);
  if (found == rt.streams.end()) return fail(cudaErrorInvalidResourceHandle);
  CUstream_st& stream = *found->second;
  if (stream.capture) {
    invalidate(*stream.capture);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  // CUDA finishes the stream's work before releasing it.
  run_all(stream);
  rt.streams.erase(found);
  return fail(device_error(this_thread().device));
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  const auto lock = lock_runtime();
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capture) {
    invalidate(*stream->capture);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (const cudaError_t refused = check_unsafe_call()) return fail(refused);
  if (stream->legacy) {
    if (const cudaError_t conflict = check_legacy_use(stream->device)) return fail(conflict);
    // Counted as waiting for the device's blocking streams too (not its non-blocking ones).
    for (const auto& [other_handle, other] : runtime().streams) {
      if (other->device == stream->device && (other->flags & cudaStreamNonBlocking) == 0) {
        run_all(*other);
      }
    }
  }
  run_all(*stream);
  return fail(device_error(stream->device));
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  const auto lock = lock_runtime();
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (stream->capture) {
    invalidate(*stream->capture);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (const cudaError_t refused = check_unsafe_call()) return fail(refused);
  if (const cudaError_t sticky = device_error(stream->device)) return fail(sticky);
  if (stream->done == stream->issued) return cudaSuccess;
  // Polling code must see the work pending once; it has run by the next query.
  run_all(*stream);
  if (const cudaError_t sticky = device_error(stream->device)) return fail(sticky);
  return fail(cudaErrorNotReady);
}

cudaError_t cudaDeviceSynchronize() {
  const auto lock = lock_runtime();
  const int device = this_thread().device;
  for (const auto& capture : runtime().captures) {
    for (const auto& [stream, clock] : capture->clocks) {
      if (stream->device == device) {
        invalidate(*capture);
        return fail(cudaErrorStreamCaptureUnsupported);
      }
    }
  }
  if (const cudaError_t refused = check_unsafe_call()) return fail(refused);
  return fail(synchronize_device(device));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t handle, cudaHostFn_t function, void* data) {
  const auto lock = lock_runtime();
  if (function == nullptr) return fail(cudaErrorInvalidValue);
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  return fail(enqueue_item(
      *stream,
      Item{Work{"a host function", [function, data] { function(data); }}, WorkKind::host}));
}
