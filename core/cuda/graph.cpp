#include "core/cuda/graph.h"

#include <algorithm>
#include <array>
#include <memory>

#include "core/backend.h"
#include "core/cuda/context.h"

namespace alloy::cuda {

std::size_t CudaGraph::nodes() const {
  std::size_t count = 0;
  ALLOY_CUDA_CHECK(cudaGraphGetNodes(graph_.get(), nullptr, &count),
                   "counting the nodes of a captured graph");
  return count;
}

GraphExec::GraphExec(const CudaGraph& graph, int device) : device_(device) {
  const DeviceGuard guard(device);
  cudaGraphExec_t exec = nullptr;
  ALLOY_CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0),
                   "instantiating a captured graph of ", graph.nodes(), " nodes on cuda:", device);
  exec_ = Owned<cudaGraphExec_t, cudaGraphExecDestroy>(exec);
}

void GraphExec::launch(cudaStream_t stream) const {
  ALLOY_CUDA_CHECK(cudaGraphLaunch(exec_.get(), stream),
                   "launching a captured graph on cuda:", device_);
}

StreamCapture::StreamCapture(Device device, GraphPool& pool)
    : device_(device.index), stream_(stream_of(device)), routing_(pool) {
  ALLOY_CHECK(pool.device() == device.index, "capturing on ", device.str(),
              " into a memory pool of cuda:", pool.device());
  ALLOY_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
                   "beginning a graph capture on the stream of ", device.str());
  capturing_ = true;
}

StreamCapture::~StreamCapture() {
  if (!capturing_) return;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) {
    static_cast<void>(cudaGraphDestroy(graph));
  }
  static_cast<void>(cudaGetLastError());
}

CudaGraph StreamCapture::finish() {
  cudaGraph_t captured = nullptr;
  const cudaError_t status = cudaStreamEndCapture(stream_, &captured);
  capturing_ = false;
  CudaGraph graph(captured);  // owned from here, whatever happens below
  if (status != cudaSuccess || captured == nullptr) {
    // Not sticky, but left for the next cudaGetLastError (a kernel launch check) to trip on.
    static_cast<void>(cudaGetLastError());
    fail_call("cudaStreamEndCapture(stream_, &captured)",
              status == cudaSuccess ? "no graph (an earlier call invalidated the capture)"
                                    : status_text(status),
              detail::concat("ending the graph capture on cuda:", device_));
  }
  return graph;
}

namespace {

// A graph and the pool its memory came from. The pool is declared first so that it is
// destroyed last: the graph's memory stays reserved for as long as the graph can run.
class CapturedGraph final : public CapturedWork {
 public:
  CapturedGraph(Device device, const std::function<void()>& work)
      : device_(device), pool_(device.index) {
    CudaGraph graph;
    {
      StreamCapture capture(device, pool_);
      work();
      graph = capture.finish();
    }
    nodes_ = graph.nodes();
    exec_ = GraphExec(graph, device.index);
    const PoolStatistics pool = pool_.statistics();
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      replay_bytes_[c] = std::max<std::int64_t>(0, pool.in_use_at_peak[c] - pool.in_use[c]);
    }
  }

  void replay() override { exec_.launch(stream_of(device_)); }
  std::size_t nodes() const override { return nodes_; }
  std::array<std::int64_t, kMemoryCategoryCount> replay_bytes() const override {
    return replay_bytes_;
  }

 private:
  Device device_;
  GraphPool pool_;
  GraphExec exec_;
  std::size_t nodes_ = 0;
  std::array<std::int64_t, kMemoryCategoryCount> replay_bytes_{};
};

}  // namespace

}  // namespace alloy::cuda

namespace alloy {

std::unique_ptr<CapturedWork> capture_cuda_work(Device device, const std::function<void()>& work) {
  ALLOY_CHECK(device.is_cuda(), "capture_cuda_work: ", device.str(), " is not a CUDA device");
  return std::make_unique<cuda::CapturedGraph>(device, work);
}

}  // namespace alloy
