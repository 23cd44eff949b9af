// The cuda_graph setting, auto|on|off (docs/cuda_graphs.md): after a few
// eager warm-up steps the training step is captured once as a CUDA graph and replayed for the
// steps that follow, one launch instead of dozens of kernels. This file holds which runs can
// capture (plan_cuda_graph) and the warm-up / capture / replay sequence the trainer drives
// (StepGraph); core/cuda/graph.h holds the CUDA side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "apps/train/train_config.h"
#include "core/backend.h"
#include "core/data/loader.h"
#include "core/tensor.h"

namespace alloy::app {

enum class CudaGraphMode { automatic, on, off };

// "auto", "on" or "off"; anything else is a UsageError naming --cuda-graph.
CudaGraphMode parse_cuda_graph_mode(const std::string& text);

// What decides whether a run's training step can be captured.
struct CudaGraphSetting {
  bool cuda = false;   // the step runs on a CUDA device
  int world_size = 1;  // ranks of data parallelism
  // The step joins a process group (data parallelism), even one of a single rank
  // (--dist-backend at world size 1).
  bool data_parallel = false;
  // Its collectives go through Gloo: the communication thread stages each bucket through host
  // memory and waits for it there, which a graph cannot hold. NCCL's collectives are device
  // work on a communication stream, and the capture holds them (docs/cuda_graphs.md).
  bool gloo = false;
};

struct CudaGraphPlan {
  bool capture = false;
  std::string reason;  // why the step runs eagerly, when capture is false
};

// off: eager. auto: capture when the setting allows it, else eager with the reason. on:
// capture, or a UsageError that says why the step cannot be captured.
CudaGraphPlan plan_cuda_graph(CudaGraphMode mode, const CudaGraphSetting& setting);

// The trainer's step on a batch already on the device: run eagerly, or under capture (then its
// host code runs but the device does nothing until the graph is launched). It must keep no
// host-side state that a replay, which runs no host code, would leave behind: the optimizer's
// step count and learning rate live on the device (core/optim/optimizer.h).
using StepWork = std::function<void(const Tensor& images, const Tensor& labels)>;

// How a StepGraph captures: capture_cuda_work (core/backend.h), or a test's stand-in.
using CaptureFunction =
    std::function<std::unique_ptr<CapturedWork>(Device, const std::function<void()>&)>;

class StepGraph {
 public:
  // Eager steps before the capture: every lazily created buffer (optimizer state, gradients,
  // cuDNN algorithm choices and descriptors, cuBLAS's first-call setup) exists by then, so the
  // captured step allocates only what each step allocates.
  static constexpr std::int64_t kWarmupSteps = 3;

  // `required` (--cuda-graph on): a step that cannot be captured is an error, not a reason to
  // run eagerly.
  StepGraph(Device device, bool required, CaptureFunction capture = capture_cuda_work);

  // Runs the training step of `batch` (on the device already: the stager's buffers, which
  // alternate between steps): the batch is copied device to device into fixed buffers, then
  // the step runs eagerly on them (the first kWarmupSteps times), is captured and launched
  // (once), or is replayed (every time after). Returns false, having done nothing, for a batch
  // whose shape differs from the first one's (an epoch's last, smaller batch) and once capture
  // has failed in auto mode: the caller then runs the step eagerly itself.
  // With `required`, a failed capture throws Error naming what could not be captured.
  bool step(const data::Batch& batch, const StepWork& work);
  // The same for any step of two tensors on the device (a sequence model's inputs and targets).
  bool step(const Tensor& inputs, const Tensor& targets, const StepWork& work);

  // A line for the user when one is due (capture failed: the steps now run eagerly), once.
  std::optional<std::string> take_notice();

  bool captured() const { return captured_ != nullptr; }
  // Launches of the captured graph: the captured step's own first run, then every replay.
  std::int64_t launches() const { return launches_; }
  // Nodes of the captured graph (0 before the capture): what one launch runs.
  std::size_t nodes() const { return captured_ ? captured_->nodes() : 0; }

 private:
  void launch();

  Device device_;
  bool required_;
  CaptureFunction capture_;
  // Where the captured step reads its batch: allocated before the capture, outside its pool,
  // and kept for the graph's lifetime.
  Tensor images_;
  Tensor labels_;
  std::int64_t warmup_steps_ = 0;
  std::unique_ptr<CapturedWork> captured_;
  std::int64_t launches_ = 0;
  bool given_up_ = false;
  std::optional<std::string> notice_;
};

// The step graph of a training run of `options` on `device` over `world_size` ranks
// (`data_parallel`: it joined a process group, even of one rank), as plan_cuda_graph decides
// under its cuda_graph setting; or null, with `reason` set to why its steps run eagerly. Gloo
// is the default backend only on the CPU, where nothing is captured: only a dist_backend set
// to gloo makes a CUDA run's collectives Gloo's.
std::unique_ptr<StepGraph> make_step_graph(const TrainConfig& options, Device device,
                                           int world_size, bool data_parallel, std::string& reason);

}  // namespace alloy::app
