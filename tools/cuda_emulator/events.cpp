// Events: a record marks a point in a stream's work; waiting on it (from the host or from
// another stream) runs the stream up to that point. Recorded during a capture, an event marks
// a point of the graph instead, and a stream that waits on it joins the capture.
#include <chrono>

#include "tools/cuda_emulator/runtime.h"

namespace alloy::emulator {

namespace {

constexpr unsigned kEventFlags =
    cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;

CUevent_st* find_event(cudaEvent_t handle) {
  const auto found = runtime().events.find(handle);
  return found == runtime().events.end() ? nullptr : found->second.get();
}

bool in_capture(const CUevent_st& event) {
  return !event.capture.expired();
}

// Whether the work before the event's latest record has run (true if never recorded).
bool complete(const CUevent_st& event) {
  if (!event.recorded) return true;
  const auto stream = event.stream.lock();
  return !stream || stream->done >= event.position;
}

// The checks shared by host waits on an event: a stream capture forbids them.
cudaError_t check_host_wait(const CUevent_st& event) {
  if (in_capture(event)) return cudaErrorCapturedEvent;
  if (const cudaError_t refused = check_unsafe_call()) return refused;
  return device_error(event.device);
}

void run_to(const CUevent_st& event) {
  if (const auto stream = event.stream.lock()) run_until(*stream, event.position);
}

}  // namespace

}  // namespace alloy::emulator

using namespace alloy::emulator;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* handle, unsigned flags) {
  const auto lock = lock_runtime();
  if (handle == nullptr || (flags & ~kEventFlags) != 0) return fail(cudaErrorInvalidValue);
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) {
    return fail(cudaErrorInvalidValue);
  }
  const int device = this_thread().device;
  if (const cudaError_t sticky = device_error(device)) return fail(sticky);
  auto event = std::make_shared<CUevent_st>();
  event->device = device;
  event->flags = flags;
  *handle = event.get();
  runtime().events.emplace(event.get(), std::move(event));
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* handle) {
  return cudaEventCreateWithFlags(handle, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t handle) {
  const auto lock = lock_runtime();
  // A pending record keeps its own reference: it still runs.
  if (runtime().events.erase(handle) == 0) return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t stream_handle) {
  const auto lock = lock_runtime();
  CUevent_st* event = find_event(handle);
  CUstream_st* stream = find_stream(stream_handle);
  if (event == nullptr || stream == nullptr || event->device != stream->device) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (const cudaError_t sticky = device_error(stream->device)) return fail(sticky);
  ++event->generation;
  event->recorded = true;
  event->executed = false;
  if (stream->capture) {
    Capture& capture = *stream->capture;
    if (capture.invalidated) return fail(cudaErrorStreamCaptureInvalidated);
    event->stream.reset();
    event->capture = stream->capture;
    event->clock = capture.clocks[stream];
    return cudaSuccess;
  }
  event->capture.reset();
  const std::shared_ptr<CUevent_st> shared = runtime().events.at(handle);
  const std::uint64_t generation = event->generation;
  const cudaError_t status = enqueue_item(*stream, Item{Work{"an event record",
                                                             [shared, generation] {
                                                               if (shared->generation != generation)
                                                                 return;
                                                               shared->executed = true;
                                                               shared->executed_at =
                                                                   std::chrono::steady_clock::now();
                                                             }},
                                                        WorkKind::control});
  if (status != cudaSuccess) {
    event->recorded = false;
    return fail(status);
  }
  event->stream = shared_stream(*stream);
  event->position = stream->issued;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t handle) {
  const auto lock = lock_runtime();
  CUevent_st* event = find_event(handle);
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t refused = check_host_wait(*event)) return fail(refused);
  if (complete(*event)) return cudaSuccess;
  // Polling code must see the work pending once; it has run by the next query.
  run_to(*event);
  if (const cudaError_t sticky = device_error(event->device)) return fail(sticky);
  return fail(cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t handle) {
  const auto lock = lock_runtime();
  CUevent_st* event = find_event(handle);
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t refused = check_host_wait(*event)) return fail(refused);
  run_to(*event);
  return fail(device_error(event->device));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream_handle, cudaEvent_t handle, unsigned flags) {
  const auto lock = lock_runtime();
  if (flags != 0) return fail(cudaErrorInvalidValue);
  CUevent_st* event = find_event(handle);
  CUstream_st* stream = find_stream(stream_handle);
  if (event == nullptr || stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t sticky = device_error(stream->device)) return fail(sticky);
  if (stream->legacy) {
    if (const cudaError_t conflict = check_legacy_use(stream->device)) return fail(conflict);
  }
  if (const std::shared_ptr<Capture> capture = event->capture.lock()) {
    if (stream->capture && stream->capture != capture) {
      invalidate(*capture);
      invalidate(*stream->capture);
      return fail(cudaErrorStreamCaptureMerge);
    }
    if (capture->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
    // The stream joins the capture (or depends on more of it): its clock takes the event's.
    stream->capture = capture;
    CaptureClock& clock = capture->clocks[stream];
    for (const auto& [other, nodes] : event->clock) {
      if (clock[other] < nodes) clock[other] = nodes;
    }
    return cudaSuccess;
  }
  if (stream->capture) {
    // A graph cannot depend on work outside it.
    if (!event->recorded || complete(*event)) return cudaSuccess;
    invalidate(*stream->capture);
    return fail(cudaErrorStreamCaptureIsolation);
  }
  if (complete(*event)) return cudaSuccess;
  return fail(enqueue_item(*stream, wait_item({WaitTarget(event->stream, event->position)})));
}

cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start_handle,
                                 cudaEvent_t end_handle) {
  const auto lock = lock_runtime();
  if (milliseconds == nullptr) return fail(cudaErrorInvalidValue);
  const CUevent_st* start = find_event(start_handle);
  const CUevent_st* end = find_event(end_handle);
  if (start == nullptr || end == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (((start->flags | end->flags) & cudaEventDisableTiming) != 0) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  if (in_capture(*start) || in_capture(*end)) return fail(cudaErrorCapturedEvent);
  if (const cudaError_t sticky = device_error(end->device)) return fail(sticky);
  // Elapsed time is no point of completion: the host must have waited for both.
  if (!start->executed || !end->executed) return fail(cudaErrorNotReady);
  *milliseconds =
      std::chrono::duration<float, std::milli>(end->executed_at - start->executed_at).count();
  return cudaSuccess;
}
