#include "apps/train/step_graph.h"

#include <utility>

#include "core/error.h"
#include "core/setting_error.h"

namespace alloy::app {

CudaGraphMode parse_cuda_graph_mode(const std::string& text) {
  if (text == "auto") return CudaGraphMode::automatic;
  if (text == "on") return CudaGraphMode::on;
  if (text == "off") return CudaGraphMode::off;
  setting_fail("{cuda_graph} '", text, "' is not one of auto, on or off");
}

CudaGraphPlan plan_cuda_graph(CudaGraphMode mode, const CudaGraphSetting& setting) {
  if (mode == CudaGraphMode::off) return {false, "--cuda-graph off"};
  // Each reason below makes capture impossible or a replay wrong; `on` names it as the error.
  std::string reason;
  if (!setting.cuda) {
    reason = "the step runs on the CPU, and CUDA graphs capture CUDA work only";
  } else if ((setting.world_size > 1 || setting.data_parallel) && setting.gloo) {
    reason = detail::concat(
        "data parallelism over Gloo (", setting.world_size,
        setting.world_size == 1 ? " rank" : " ranks",
        ") stages each gradient bucket through host memory and waits for it on the host, which "
        "a CUDA graph cannot capture; NCCL's collectives can (--dist-backend nccl)");
  }
  if (reason.empty()) return {true, ""};
  if (mode == CudaGraphMode::on) {
    setting_fail("{cuda_graph} on: the training step cannot be captured: ", reason,
                 " (use {cuda_graph} auto or off)");
  }
  return {false, reason};
}

StepGraph::StepGraph(Device device, bool required, CaptureFunction capture)
    : device_(device), required_(required), capture_(std::move(capture)) {}

bool StepGraph::step(const data::Batch& batch, const StepWork& work) {
  return step(batch.images, batch.labels, work);
}

bool StepGraph::step(const Tensor& images, const Tensor& labels, const StepWork& work) {
  if (given_up_) return false;
  if (!images_.defined()) {
    images_ = Tensor::empty(images.shape(), images.dtype(), device_, MemoryCategory::data);
    labels_ = Tensor::empty(labels.shape(), labels.dtype(), device_, MemoryCategory::data);
  } else if (images.shape() != images_.shape() || labels.shape() != labels_.shape()) {
    return false;  // a graph replays fixed shapes
  }
  // Outside the graph: a replay reads the batch from these buffers. The batch is on the device
  // already (the stager uploaded it and ordered the stream after the upload), so these are
  // device-to-device copies on the device's stream: no upload, no host wait, and they run after
  // the previous step has finished with the buffers.
  images_.copy_from(images);
  labels_.copy_from(labels);

  if (captured_) {
    launch();
    return true;
  }
  if (warmup_steps_ < kWarmupSteps) {
    work(images_, labels_);
    ++warmup_steps_;
    return true;
  }
  try {
    captured_ = capture_(device_, [&] { work(images_, labels_); });
  } catch (const Error& error) {
    // The device ran none of the captured work, and the step keeps no host state: the
    // caller runs it again eagerly as if nothing had happened.
    if (required_) {
      setting_failure("{cuda_graph} on: the training step cannot be captured as a CUDA graph: ",
                      error.what());
    }
    given_up_ = true;
    images_ = Tensor();
    labels_ = Tensor();
    notice_ = detail::concat(
        "--cuda-graph auto: the training step runs eagerly, since capturing it as a CUDA graph "
        "failed: ",
        error.what());
    return false;
  }
  // The capture ran the step's host code but issued nothing to the device: this runs it.
  launch();
  return true;
}

void StepGraph::launch() {
  captured_->replay();
  ++launches_;
  // A launch allocates nothing, yet it uses the pool's memory as the captured step used it:
  // the statistics (the epoch's peak_memory_bytes) see the step's peak as for an eager step.
  MemoryStats& stats = memory_stats(device_);
  const auto bytes = captured_->replay_bytes();
  for (std::size_t c = 0; c < bytes.size(); ++c) {
    stats.on_allocate(static_cast<MemoryCategory>(c), static_cast<std::size_t>(bytes[c]));
  }
  for (std::size_t c = 0; c < bytes.size(); ++c) {
    stats.on_free(static_cast<MemoryCategory>(c), static_cast<std::size_t>(bytes[c]));
  }
}

std::optional<std::string> StepGraph::take_notice() {
  return std::exchange(notice_, std::nullopt);
}

std::unique_ptr<StepGraph> make_step_graph(const TrainConfig& options, Device device,
                                           int world_size, bool data_parallel,
                                           std::string& reason) {
  const CudaGraphMode mode = parse_cuda_graph_mode(options.cuda_graph);
  const CudaGraphPlan plan =
      plan_cuda_graph(mode, {device.is_cuda(), world_size, data_parallel,
                             options.is_set("dist_backend") && options.dist_backend == "gloo"});
  reason = plan.reason;
  if (!plan.capture) return nullptr;
  return std::make_unique<StepGraph>(device, mode == CudaGraphMode::on);
}

}  // namespace alloy::app
