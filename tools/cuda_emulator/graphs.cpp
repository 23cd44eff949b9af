// Stream capture and CUDA graphs. Work issued to a capturing stream becomes a node of the
// capture's graph (in issue order, which respects every dependency the capture saw); a launch
// of the instantiated graph queues its nodes, with the arguments captured, on a stream.
// Calls that CUDA deems potentially unsafe during a capture are refused per the calling
// thread's capture mode, and invalidate the capture (cudaThreadExchangeStreamCaptureMode).
#include <algorithm>
#include <utility>

#include "tools/cuda_emulator/runtime.h"

namespace alloy::emulator {

namespace {

bool valid_mode(cudaStreamCaptureMode mode) {
  return mode == cudaStreamCaptureModeGlobal || mode == cudaStreamCaptureModeThreadLocal ||
         mode == cudaStreamCaptureModeRelaxed;
}

// Takes every stream of `capture` out of capture mode and forgets the capture.
void end(Capture& capture) {
  Runtime& rt = runtime();
  for (const auto& [stream, clock] : capture.clocks) {
    if (stream->legacy) continue;
    const auto found = rt.streams.find(stream);
    if (found != rt.streams.end()) found->second->capture.reset();
  }
  rt.captures.erase(std::remove_if(rt.captures.begin(), rt.captures.end(),
                                   [&](const auto& active) { return active.get() == &capture; }),
                    rt.captures.end());
}

}  // namespace

void invalidate(Capture& capture) {
  capture.invalidated = true;
}

void append_node(Capture& capture, const CUstream_st& stream, Item item) {
  capture.graph->nodes.push_back(std::make_unique<CUgraphNode_st>(CUgraphNode_st{std::move(item)}));
  ++capture.clocks[&stream][&stream];
}

cudaError_t check_unsafe_call() {
  const auto lock = lock_runtime();
  const cudaStreamCaptureMode mode = this_thread().capture_mode;
  if (mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  bool refused = false;
  for (const auto& capture : runtime().captures) {
    const bool own = capture->thread == std::this_thread::get_id();
    if ((own && capture->mode != cudaStreamCaptureModeRelaxed) ||
        (!own && mode == cudaStreamCaptureModeGlobal &&
         capture->mode == cudaStreamCaptureModeGlobal)) {
      invalidate(*capture);
      refused = true;
    }
  }
  return refused ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t check_legacy_use(int device) {
  const auto lock = lock_runtime();
  bool conflict = false;
  for (const auto& capture : runtime().captures) {
    for (const auto& [stream, clock] : capture->clocks) {
      if (stream->device == device && (stream->flags & cudaStreamNonBlocking) == 0) {
        invalidate(*capture);
        conflict = true;
      }
    }
  }
  return conflict ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

}  // namespace alloy::emulator

using namespace alloy::emulator;

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr || !valid_mode(*mode)) return fail(cudaErrorInvalidValue);
  std::swap(*mode, this_thread().capture_mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t handle, cudaStreamCaptureMode mode) {
  const auto lock = lock_runtime();
  if (!valid_mode(mode)) return fail(cudaErrorInvalidValue);
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (stream->legacy) return fail(cudaErrorStreamCaptureUnsupported);
  if (stream->capture) return fail(cudaErrorIllegalState);
  if (const cudaError_t sticky = device_error(stream->device)) return fail(sticky);
  auto capture = std::make_shared<Capture>();
  capture->mode = mode;
  capture->thread = std::this_thread::get_id();
  capture->origin = stream;
  capture->clocks[stream];
  stream->capture = capture;
  runtime().captures.push_back(std::move(capture));
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t handle, cudaGraph_t* graph) {
  const auto lock = lock_runtime();
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  *graph = nullptr;
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (!stream->capture) return fail(cudaErrorIllegalState);
  const std::shared_ptr<Capture> capture = stream->capture;
  if (capture->origin != stream) {
    invalidate(*capture);
    return fail(cudaErrorStreamCaptureUnmatched);
  }
  if (capture->mode != cudaStreamCaptureModeRelaxed &&
      capture->thread != std::this_thread::get_id()) {
    return fail(cudaErrorStreamCaptureWrongThread);
  }
  end(*capture);
  if (capture->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  // Every stream forked into the capture must have joined the origin again.
  const CaptureClock& origin = capture->clocks[stream];
  for (const auto& [other, clock] : capture->clocks) {
    const auto own = clock.find(other);
    const auto seen = origin.find(other);
    const std::size_t nodes = own == clock.end() ? 0 : own->second;
    if (other != stream && nodes > (seen == origin.end() ? 0 : seen->second)) {
      return fail(cudaErrorStreamCaptureUnjoined);
    }
  }
  CUgraph_st* result = capture->graph.get();
  runtime().graphs.emplace(result, std::move(capture->graph));
  *graph = result;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t handle, cudaStreamCaptureStatus* status) {
  const auto lock = lock_runtime();
  if (status == nullptr) return fail(cudaErrorInvalidValue);
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (stream->legacy) {
    for (const auto& capture : runtime().captures) {
      for (const auto& [other, clock] : capture->clocks) {
        if (other->device == stream->device && (other->flags & cudaStreamNonBlocking) == 0) {
          return fail(cudaErrorStreamCaptureImplicit);
        }
      }
    }
  }
  *status = !stream->capture               ? cudaStreamCaptureStatusNone
            : stream->capture->invalidated ? cudaStreamCaptureStatusInvalidated
                                           : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* count) {
  const auto lock = lock_runtime();
  if (count == nullptr || runtime().graphs.count(graph) == 0) return fail(cudaErrorInvalidValue);
  const std::size_t actual = graph->nodes.size();
  if (nodes != nullptr) {
    for (std::size_t i = 0; i < *count; ++i) {
      nodes[i] = i < actual ? graph->nodes[i].get() : nullptr;
    }
  }
  if (nodes == nullptr || *count > actual) *count = actual;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  const auto lock = lock_runtime();
  if (runtime().graphs.erase(graph) == 0) return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  const auto lock = lock_runtime();
  if (exec == nullptr || flags != 0 || runtime().graphs.count(graph) == 0) {
    return fail(cudaErrorInvalidValue);
  }
  auto instance = std::make_unique<CUgraphExec_st>();
  for (const auto& node : graph->nodes)
    instance->nodes.push_back(node->item);
  *exec = instance.get();
  runtime().execs.emplace(instance.get(), std::move(instance));
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  const auto lock = lock_runtime();
  if (runtime().execs.erase(exec) == 0) return fail(cudaErrorInvalidValue);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t handle) {
  const auto lock = lock_runtime();
  if (runtime().execs.count(exec) == 0) return fail(cudaErrorInvalidValue);
  CUstream_st* stream = find_stream(handle);
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  for (const Item& node : exec->nodes) {
    if (const cudaError_t status = enqueue_item(*stream, node)) return fail(status);
  }
  return cudaSuccess;
}
