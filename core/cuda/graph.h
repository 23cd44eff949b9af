// CUDA graphs: a device's work captured once from its stream and replayed with one launch
// (docs/cuda_graphs.md). RAII owners of the graph and of its executable instance,
// and a capture scope that routes the device's allocations to a private pool
// (core/cuda/allocator.h), so the addresses the captured kernels use stay theirs for every
// replay. The backend-neutral entry point, capture_cuda_work, is declared in core/backend.h.
#pragma once

#include <cstddef>

#include "core/cuda/allocator.h"
#include "core/cuda/handles.h"
#include "core/device.h"

namespace alloy::cuda {

// A captured graph (the nodes and their order), not yet executable.
class CudaGraph {
 public:
  CudaGraph() = default;
  explicit CudaGraph(cudaGraph_t graph) : graph_(graph) {}
  cudaGraph_t get() const { return graph_.get(); }
  // Kernels, copies and memsets in the graph.
  std::size_t nodes() const;

 private:
  Owned<cudaGraph_t, cudaGraphDestroy> graph_;
};

// The executable instance of a graph, launched on a stream as one unit of work.
class GraphExec {
 public:
  GraphExec() = default;
  GraphExec(const CudaGraph& graph, int device);
  // Enqueues one run of the whole graph on `stream`, after the work already there.
  void launch(cudaStream_t stream) const;

 private:
  Owned<cudaGraphExec_t, cudaGraphExecDestroy> exec_;
  int device_ = -1;
};

// Captures what this thread issues to `device`'s stream from construction to finish(), in
// thread-local mode: the calls of this thread that a graph cannot hold (a stream or device
// synchronise, a copy from pageable host memory, a cudaMalloc other than the pool's) fail
// instead of running, and invalidate the capture. While the scope lives, every allocation and
// free on the device goes to `pool`.
class StreamCapture {
 public:
  StreamCapture(Device device, GraphPool& pool);
  // A capture that was not finished (the captured code threw) is ended and discarded, and the
  // error it left in the runtime is cleared: the exception in flight reports it.
  ~StreamCapture();
  StreamCapture(const StreamCapture&) = delete;
  StreamCapture& operator=(const StreamCapture&) = delete;

  // Ends the capture and returns the graph; throws Error naming the failure when the capture
  // was invalidated.
  CudaGraph finish();

 private:
  int device_;
  cudaStream_t stream_;
  PoolRouting routing_;
  bool capturing_ = false;
};

}  // namespace alloy::cuda
