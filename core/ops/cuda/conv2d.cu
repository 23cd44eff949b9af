#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "core/cuda/context.h"
#include "core/ops/cuda/channel_reduce.cuh"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/conv2d.h"
#include "core/ops/cuda/elementwise.h"
#include "core/ops/cuda/last_block.h"

namespace alloy::cuda {

namespace {

// Largest workspace an algorithm may ask for; faster algorithms needing more are passed over.
constexpr std::size_t kWorkspaceLimit = std::size_t{1} << 30;

using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      fail("conv2d: no cuDNN type for dtype ", dtype_name(dtype));
  }
}

TensorDesc tensor_desc(DType dtype, int n, int c, int h, int w) {
  cudnnTensorDescriptor_t raw = nullptr;
  ALLOY_CUDA_CHECK(cudnnCreateTensorDescriptor(&raw), "conv2d: creating a tensor descriptor");
  TensorDesc desc(raw);
  ALLOY_CUDA_CHECK(
      cudnnSetTensor4dDescriptor(raw, CUDNN_TENSOR_NCHW, cudnn_type(dtype), n, c, h, w),
      "conv2d: describing a ", dtype_name(dtype), "[", n, ", ", c, ", ", h, ", ", w, "] tensor");
  return desc;
}

FilterDesc filter_desc(DType dtype, const Conv2dGeometry& g) {
  cudnnFilterDescriptor_t raw = nullptr;
  ALLOY_CUDA_CHECK(cudnnCreateFilterDescriptor(&raw), "conv2d: creating a filter descriptor");
  FilterDesc desc(raw);
  ALLOY_CUDA_CHECK(cudnnSetFilter4dDescriptor(raw, cudnn_type(dtype), CUDNN_TENSOR_NCHW, g.filters,
                                              g.channels, g.kernel_h, g.kernel_w),
                   "conv2d: describing a ", dtype_name(dtype), "[", g.filters, ", ", g.channels,
                   ", ", g.kernel_h, ", ", g.kernel_w, "] filter");
  return desc;
}

ConvDesc conv_desc(const Conv2dGeometry& g, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t raw = nullptr;
  ALLOY_CUDA_CHECK(cudnnCreateConvolutionDescriptor(&raw),
                   "conv2d: creating a convolution descriptor");
  ConvDesc desc(raw);
  ALLOY_CUDA_CHECK(cudnnSetConvolution2dDescriptor(raw, g.params.pad_h, g.params.pad_w,
                                                   g.params.stride_h, g.params.stride_w, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                   "conv2d: describing padding ", g.params.pad_h, "x", g.params.pad_w,
                   " and stride ", g.params.stride_h, "x", g.params.stride_w);
  ALLOY_CUDA_CHECK(cudnnSetConvolutionMathType(raw, math), "conv2d: setting the math type");
  return desc;
}

// The first (fastest by cuDNN's heuristics) algorithm that works within the workspace limit;
// for the backward passes a deterministic one when there is one, so reruns give equal bits.
template <class Perf>
const Perf& pick(const Perf* results, int count, bool prefer_deterministic, const char* what) {
  const Perf* chosen = nullptr;
  for (int i = 0; i < count; ++i) {
    const Perf& perf = results[i];
    if (perf.status != CUDNN_STATUS_SUCCESS || perf.memory > kWorkspaceLimit) continue;
    if (chosen == nullptr) chosen = &perf;
    if (!prefer_deterministic || perf.determinism == CUDNN_DETERMINISTIC) return perf;
  }
  ALLOY_CHECK(chosen != nullptr, "conv2d: cuDNN offers no ", what, " algorithm for this shape");
  return *chosen;
}

// Everything cuDNN needs for one (dtype, shape): descriptors, and per direction a convolution
// descriptor carrying the chosen algorithm's math type.
struct Plan {
  Plan(cudnnHandle_t handle, DType dtype, const Conv2dGeometry& g);

  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc forward_conv, data_conv, filter_conv;
  cudnnConvolutionFwdAlgo_t forward_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  std::size_t forward_workspace = 0, data_workspace = 0, filter_workspace = 0;
};

Plan::Plan(cudnnHandle_t handle, DType dtype, const Conv2dGeometry& g)
    : x(tensor_desc(dtype, g.batch, g.channels, g.height, g.width)),
      y(tensor_desc(dtype, g.batch, g.filters, g.out_h, g.out_w)),
      bias(tensor_desc(dtype, 1, g.filters, 1, 1)),
      w(filter_desc(dtype, g)) {
  // Tensor cores for half data; true fp32 (FMA, no TF32) for f32 data.
  const cudnnMathType_t allowed = dtype == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  const ConvDesc probe = conv_desc(g, allowed);
  constexpr int kMaxResults = 16;
  int found = 0;

  cudnnConvolutionFwdAlgoPerf_t forward[kMaxResults];
  ALLOY_CUDA_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, x.get(), w.get(), probe.get(),
                                                          y.get(), kMaxResults, &found, forward),
                   "conv2d: choosing a forward algorithm");
  const auto& f = pick(forward, found, false, "forward");
  forward_algo = f.algo;
  forward_workspace = f.memory;
  forward_conv = conv_desc(g, f.mathType);

  cudnnConvolutionBwdDataAlgoPerf_t data[kMaxResults];
  ALLOY_CUDA_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                       handle, w.get(), y.get(), probe.get(), x.get(), kMaxResults, &found, data),
                   "conv2d: choosing a backward-data algorithm");
  const auto& d = pick(data, found, true, "backward-data");
  data_algo = d.algo;
  data_workspace = d.memory;
  data_conv = conv_desc(g, d.mathType);

  cudnnConvolutionBwdFilterAlgoPerf_t filter[kMaxResults];
  ALLOY_CUDA_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                       handle, x.get(), y.get(), probe.get(), w.get(), kMaxResults, &found, filter),
                   "conv2d: choosing a backward-filter algorithm");
  const auto& k = pick(filter, found, true, "backward-filter");
  filter_algo = k.algo;
  filter_workspace = k.memory;
  filter_conv = conv_desc(g, k.mathType);
}

using PlanKey = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int, int>;

struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

Plan& plan_for(Device device, cudnnHandle_t handle, DType dtype, const Conv2dGeometry& g) {
  const PlanKey key{device.index,      static_cast<int>(dtype),
                    g.batch,           g.channels,
                    g.height,          g.width,
                    g.filters,         g.kernel_h,
                    g.kernel_w,        g.params.stride_h,
                    g.params.stride_w, g.params.pad_h,
                    g.params.pad_w,    g.out_h};
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto& slot = cache.plans[key];
  if (!slot) slot = std::make_unique<Plan>(handle, dtype, g);
  return *slot;
}

// The fp32 sum of dy over (n, p, q) per output channel, added into db: one block per (chunk,
// channel) (channel_reduce.cuh); with several chunks, the partials are summed in chunk order by
// the grid's last block.
template <class T>
__global__ void bias_grad_kernel(const T* dy, ChannelSplit s, float* partials, void* db,
                                 DType db_dtype, unsigned int* arrivals) {
  const unsigned int chunk = blockIdx.x;
  const std::int64_t c = blockIdx.y;
  const float sum = chunk_sum(
      s, chunk, [&](unsigned int n, unsigned int p) { return widen(dy[channel_at(s, n, c, p)]); });
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) store_any(db, db_dtype, c, load_any(db, db_dtype, c) + sum);
    return;
  }
  if (threadIdx.x == 0) partials[c * gridDim.x + chunk] = sum;
  if (!arrive_last(arrivals)) return;
  for (std::int64_t channel = threadIdx.x; channel < s.channels; channel += blockDim.x) {
    float total = 0.0f;
    for (unsigned int k = 0; k < gridDim.x; ++k)
      total += __ldcg(partials + channel * gridDim.x + k);
    store_any(db, db_dtype, channel, load_any(db, db_dtype, channel) + total);
  }
}

}  // namespace

int conv2d_plan_count(Device device) {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  int count = 0;
  for (const auto& [key, plan] : cache.plans)
    count += std::get<0>(key) == device.index;
  return count;
}

void conv2d_forward(Device device, const Conv2dGeometry& g, DType dtype, const void* x,
                    const void* w, const void* b, void* y) {
  DeviceContext& ctx = context(device);
  Plan& plan = plan_for(device, ctx.cudnn.get(), dtype, g);
  const DeviceBuffer workspace(plan.forward_workspace, device, MemoryCategory::workspace);
  const float one = 1.0f, zero = 0.0f;
  ALLOY_CUDA_CHECK(
      cudnnConvolutionForward(ctx.cudnn.get(), &one, plan.x.get(), x, plan.w.get(), w,
                              plan.forward_conv.get(), plan.forward_algo, workspace.get(),
                              plan.forward_workspace, &zero, plan.y.get(), y),
      "conv2d_forward of ", dtype_name(dtype), " x [", g.batch, ", ", g.channels, ", ", g.height,
      ", ", g.width, "] with ", g.filters, " filters ", g.kernel_h, "x", g.kernel_w, " (algorithm ",
      static_cast<int>(plan.forward_algo), ")");
  if (b != nullptr) {
    ALLOY_CUDA_CHECK(
        cudnnAddTensor(ctx.cudnn.get(), &one, plan.bias.get(), b, &one, plan.y.get(), y),
        "conv2d_forward: adding the bias of ", g.filters, " channels");
  }
}

void conv2d_backward(Device device, const Conv2dGeometry& g, DType dtype, const void* x,
                     const void* w, const void* dy, void* dw, DType dw_dtype, void* db,
                     DType db_dtype, void* dx) {
  DeviceContext& ctx = context(device);
  const cudnnHandle_t handle = ctx.cudnn.get();
  const cudaStream_t stream = ctx.stream.get();
  const float one = 1.0f, zero = 0.0f;

  if (dw_dtype == dtype) {
    Plan& plan = plan_for(device, handle, dtype, g);
    const DeviceBuffer workspace(plan.filter_workspace, device, MemoryCategory::workspace);
    ALLOY_CUDA_CHECK(
        cudnnConvolutionBackwardFilter(handle, &one, plan.x.get(), x, plan.y.get(), dy,
                                       plan.filter_conv.get(), plan.filter_algo, workspace.get(),
                                       plan.filter_workspace, &one, plan.w.get(), dw),
        "conv2d_backward: filter gradient (", dtype_name(dtype), ", algorithm ",
        static_cast<int>(plan.filter_algo), ")");
  } else {
    // O1: fp32 weight gradients of a half convolution. The half values widen exactly, so the
    // fp32 convolution of the copies is the fp32-accumulated gradient.
    ALLOY_CHECK(dw_dtype == DType::f32, "conv2d_backward: dw must be f32 or ", dtype_name(dtype));
    const std::int64_t x_count = std::int64_t{g.batch} * g.channels * g.height * g.width;
    const std::int64_t y_count = std::int64_t{g.batch} * g.filters * g.out_h * g.out_w;
    const DeviceBuffer x32(static_cast<std::size_t>(x_count) * 4, device,
                           MemoryCategory::workspace);
    const DeviceBuffer dy32(static_cast<std::size_t>(y_count) * 4, device,
                            MemoryCategory::workspace);
    cast(x, dtype, x32.get(), DType::f32, x_count, stream);
    cast(dy, dtype, dy32.get(), DType::f32, y_count, stream);
    Plan& plan = plan_for(device, handle, DType::f32, g);
    const DeviceBuffer workspace(plan.filter_workspace, device, MemoryCategory::workspace);
    ALLOY_CUDA_CHECK(
        cudnnConvolutionBackwardFilter(
            handle, &one, plan.x.get(), x32.get(), plan.y.get(), dy32.get(), plan.filter_conv.get(),
            plan.filter_algo, workspace.get(), plan.filter_workspace, &one, plan.w.get(), dw),
        "conv2d_backward: fp32 filter gradient of ", dtype_name(dtype), " data (algorithm ",
        static_cast<int>(plan.filter_algo), ")");
  }

  if (db != nullptr) {
    const ChannelSplit split =
        split_channels(g.batch, g.filters, std::int64_t{g.out_h} * g.out_w, "conv2d_backward");
    const DeviceBuffer partials =
        split.chunks > 1 ? reduction_workspace(sizeof(float) * split.chunks * g.filters)
                         : DeviceBuffer();
    unsigned int* arrivals =
        split.chunks > 1 ? arrival_counter(ArrivalSlot::channel_sums, stream) : nullptr;
    dispatch_floating(dtype, "conv2d_backward", [&](auto type) {
      using T = decltype(type);
      bias_grad_kernel<<<channel_grid(split), kThreads, 0, stream>>>(
          static_cast<const T*>(dy), split, partials.as<float>(), db, db_dtype, arrivals);
    });
    ALLOY_CUDA_CHECK_LAUNCH("conv2d bias_grad_kernel over ", g.filters, " channels in ",
                            split.chunks, " chunks");
  }

  if (dx != nullptr) {
    Plan& plan = plan_for(device, handle, dtype, g);
    const DeviceBuffer workspace(plan.data_workspace, device, MemoryCategory::workspace);
    ALLOY_CUDA_CHECK(
        cudnnConvolutionBackwardData(handle, &one, plan.w.get(), w, plan.y.get(), dy,
                                     plan.data_conv.get(), plan.data_algo, workspace.get(),
                                     plan.data_workspace, &zero, plan.x.get(), dx),
        "conv2d_backward: input gradient (", dtype_name(dtype), ", algorithm ",
        static_cast<int>(plan.data_algo), ")");
  }
}

}  // namespace alloy::cuda
