#include "core/ops/cuda/attention_cudnn.h"

#include <cudnn_frontend.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/cuda/context.h"
#include "core/error.h"

namespace alloy::cuda {

namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using Dims = std::vector<std::int64_t>;

enum class Pass { forward, backward };

// The graphs' tensors, as the variant packs name them.
enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::forward:
      return "forward";
    case Pass::backward:
      return "backward";
  }
  return "?";
}

std::string describe(Pass pass, DType dtype, const AttentionGeometry& g) {
  return detail::concat("cuDNN attention ", pass_name(pass), " (", dtype_name(dtype), ", batch ",
                        g.batch, ", ", g.time, " positions, ", g.heads, " heads of ", g.head_dim,
                        ")");
}

// Alloy's layouts as [B, H, T, D] strides: q, k and v inside qkv [B, T, 3C]; y [B, T, C].
Dims shape_of(const AttentionGeometry& g) {
  return {g.batch, g.heads, g.time, g.head_dim};
}
Dims qkv_strides(const AttentionGeometry& g) {
  const std::int64_t width = 3 * g.heads * g.head_dim;
  return {g.time * width, g.head_dim, width, 1};
}
Dims y_strides(const AttentionGeometry& g) {
  const std::int64_t width = g.heads * g.head_dim;
  return {g.time * width, g.head_dim, width, 1};
}
// The statistics: f32 [B, H, T] as cuDNN's [B, H, T, 1].
Dims stats_shape(const AttentionGeometry& g) {
  return {g.batch, g.heads, g.time, 1};
}
Dims stats_strides(const AttentionGeometry& g) {
  return {g.heads * g.time, g.time, 1, 1};
}

TensorPtr input(fe::graph::Graph& graph, const char* name, Uid uid, const Dims& dims,
                const Dims& strides) {
  return graph.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

void output(const TensorPtr& tensor, Uid uid, const Dims& dims, const Dims& strides) {
  tensor->set_output(true).set_uid(uid).set_dim(dims).set_stride(strides);
}

float scale_of(const AttentionGeometry& g) {
  return 1.0f / std::sqrt(static_cast<float>(g.head_dim));
}

void define_forward(fe::graph::Graph& graph, const AttentionGeometry& g) {
  const TensorPtr q = input(graph, "q", kQ, shape_of(g), qkv_strides(g));
  const TensorPtr k = input(graph, "k", kK, shape_of(g), qkv_strides(g));
  const TensorPtr v = input(graph, "v", kV, shape_of(g), qkv_strides(g));
  const auto options = fe::graph::SDPA_attributes()
                           .set_name("attention")
                           .set_generate_stats(true)
                           .set_causal_mask(true)
                           .set_attn_scale(scale_of(g));
  const auto [o, lse] = graph.sdpa(q, k, v, options);
  output(o, kO, shape_of(g), y_strides(g));
  output(lse, kStats, stats_shape(g), stats_strides(g));
  lse->set_data_type(fe::DataType_t::FLOAT);
}

void define_backward(fe::graph::Graph& graph, const AttentionGeometry& g) {
  const TensorPtr q = input(graph, "q", kQ, shape_of(g), qkv_strides(g));
  const TensorPtr k = input(graph, "k", kK, shape_of(g), qkv_strides(g));
  const TensorPtr v = input(graph, "v", kV, shape_of(g), qkv_strides(g));
  const TensorPtr o = input(graph, "o", kO, shape_of(g), y_strides(g));
  const TensorPtr d_o = input(graph, "do", kDO, shape_of(g), y_strides(g));
  const TensorPtr stats = input(graph, "stats", kStats, stats_shape(g), stats_strides(g));
  stats->set_data_type(fe::DataType_t::FLOAT);
  const auto options = fe::graph::SDPA_backward_attributes()
                           .set_name("attention_backward")
                           .set_causal_mask(true)
                           .set_attn_scale(scale_of(g))
                           .set_deterministic_algorithm(true);
  const auto [dq, dk, dv] = graph.sdpa_backward(q, k, v, o, d_o, stats, options);
  output(dq, kDQ, shape_of(g), qkv_strides(g));
  output(dk, kDK, shape_of(g), qkv_strides(g));
  output(dv, kDV, shape_of(g), qkv_strides(g));
}

// A pass's graph with its plan and workspace, or cuDNN's reason for refusing it.
struct Plan {
  std::unique_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
  std::string failure;
};

// Builds the graph up to its execution plan; the first step cuDNN refuses ends it with the
// step's name and cuDNN's message in `failure`.
Plan build(cudnnHandle_t handle, Pass pass, DType dtype, const AttentionGeometry& g) {
  Plan plan;
  plan.graph = std::make_unique<fe::graph::Graph>();
  fe::graph::Graph& graph = *plan.graph;
  graph.set_io_data_type(dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const auto step = [&plan](const char* what, fe::error_t status) {
    if (status.is_good()) return true;
    plan.failure = detail::concat(what, ": ", status.get_message());
    return false;
  };
  try {
    if (pass == Pass::backward) {
      define_backward(graph, g);
    } else {
      define_forward(graph, g);
    }
    static_cast<void>(
        step("validating the graph", graph.validate()) &&
        step("building the operation graph", graph.build_operation_graph(handle)) &&
        step("querying the heuristics", graph.create_execution_plans({fe::HeurMode_t::A})) &&
        step("checking support", graph.check_support()) &&
        step("building the plan", graph.build_plans()) &&
        step("asking the workspace size", graph.get_workspace_size(plan.workspace)));
  } catch (const std::exception& error) {  // the frontend throws on some misuse
    plan.failure = detail::concat("defining the graph: ", error.what());
  }
  // A refused plan may leave the runtime's last error set: not a later kernel's failure.
  static_cast<void>(cudaGetLastError());
  return plan;
}

using PlanKey = std::tuple<int, int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t>;

struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, Plan> plans;
};

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

// The pass's plan on `device`, built on first use (outside any capture).
const Plan& plan_for(Device device, Pass pass, DType dtype, const AttentionGeometry& g) {
  const PlanKey key{
      device.index, static_cast<int>(pass), static_cast<int>(dtype), g.batch, g.time, g.heads,
      g.head_dim};
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  const auto found = cache.plans.find(key);
  if (found != cache.plans.end()) return found->second;
  DeviceContext& ctx = context(device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  ALLOY_CUDA_CHECK(cudaStreamIsCapturing(ctx.stream.get(), &capture),
                   "cuDNN attention: asking whether ", device.str(), "'s stream is capturing");
  ALLOY_CHECK(capture == cudaStreamCaptureStatusNone, describe(pass, dtype, g),
              ": its graph is built on first use, which a CUDA-graph capture cannot hold; run "
              "the step eagerly once first (a warm-up step does)");
  return cache.plans.emplace(key, build(ctx.cudnn.get(), pass, dtype, g)).first->second;
}

const Plan& runnable_plan(Device device, Pass pass, DType dtype, const AttentionGeometry& g) {
  const Plan& plan = plan_for(device, pass, dtype, g);
  ALLOY_CHECK(plan.failure.empty(), describe(pass, dtype, g), " on ", device.str(),
              " cannot run: ", plan.failure);
  return plan;
}

// The frontend's variant packs take non-const pointers, inputs included.
void* pointer(const void* data, std::int64_t element_offset, DType dtype) {
  return const_cast<char*>(static_cast<const char*>(data)) +
         element_offset * static_cast<std::int64_t>(dtype_size(dtype));
}

void execute(Device device, const Plan& plan, std::unordered_map<std::int64_t, void*>& pack,
             Pass pass, DType dtype, const AttentionGeometry& g) {
  DeviceBuffer workspace;
  if (plan.workspace > 0) {
    workspace =
        DeviceBuffer(static_cast<std::size_t>(plan.workspace), device, MemoryCategory::workspace);
  }
  fe::error_t status = plan.graph->execute(context(device).cudnn.get(), pack, workspace.get());
  ALLOY_CHECK(status.is_good(), describe(pass, dtype, g), " on ", device.str(),
              ": executing the plan: ", status.get_message());
}

}  // namespace

std::string cudnn_attention_unsupported(Device device, DType dtype, const AttentionGeometry& g) {
  if (dtype != DType::f16 && dtype != DType::bf16) {
    return detail::concat("cuDNN attention runs f16 and bf16 data, not ", dtype_name(dtype));
  }
  for (const Pass pass : {Pass::forward, Pass::backward}) {
    const Plan& plan = plan_for(device, pass, dtype, g);
    if (!plan.failure.empty()) return describe(pass, dtype, g) + ": " + plan.failure;
  }
  return {};
}

void cudnn_attention_forward(Device device, const void* qkv, DType dtype,
                             const AttentionGeometry& g, void* y, float* lse) {
  const Plan& plan = runnable_plan(device, Pass::forward, dtype, g);
  const std::int64_t width = g.heads * g.head_dim;
  std::unordered_map<std::int64_t, void*> pack{{kQ, pointer(qkv, 0, dtype)},
                                               {kK, pointer(qkv, width, dtype)},
                                               {kV, pointer(qkv, 2 * width, dtype)},
                                               {kO, y},
                                               {kStats, lse}};
  execute(device, plan, pack, Pass::forward, dtype, g);
}

void cudnn_attention_backward(Device device, const void* dy, const void* qkv, const void* y,
                              const float* lse, DType dtype, const AttentionGeometry& g,
                              void* dqkv) {
  const Plan& plan = runnable_plan(device, Pass::backward, dtype, g);
  const std::int64_t width = g.heads * g.head_dim;
  std::unordered_map<std::int64_t, void*> pack{
      {kQ, pointer(qkv, 0, dtype)},          {kK, pointer(qkv, width, dtype)},
      {kV, pointer(qkv, 2 * width, dtype)},  {kO, pointer(y, 0, dtype)},
      {kDO, pointer(dy, 0, dtype)},          {kStats, const_cast<float*>(lse)},
      {kDQ, pointer(dqkv, 0, dtype)},        {kDK, pointer(dqkv, width, dtype)},
      {kDV, pointer(dqkv, 2 * width, dtype)}};
  execute(device, plan, pack, Pass::backward, dtype, g);
}

}  // namespace alloy::cuda
