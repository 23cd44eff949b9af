#include <algorithm>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda/context.h"
#include "core/ops/allow_tf32.h"
#include "core/ops/conv2d_algorithm_db.h"
#include "core/ops/cuda/channel_reduce.cuh"
#include "core/ops/cuda/common.cuh"
#include "core/ops/cuda/conv2d.h"
#include "core/ops/cuda/conv2d_algorithms.h"
#include "core/ops/cuda/conv2d_direct.h"
#include "core/ops/cuda/conv2d_implicit_gemm.h"
#include "core/ops/cuda/elementwise.h"
#include "core/ops/cuda/int_divider.h"
#include "core/ops/cuda/last_block.h"
#include "core/ops/cuda/permute.h"

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

// cuDNN's memory format of a layout: for filters NHWC means KRSC.
cudnnTensorFormat_t cudnn_format(Layout layout) {
  return layout == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

// An [n, c, h, w] tensor stored in `layout`.
TensorDesc tensor_desc(DType dtype, Layout layout, int n, int c, int h, int w) {
  cudnnTensorDescriptor_t raw = nullptr;
  ALLOY_CUDA_CHECK(cudnnCreateTensorDescriptor(&raw), "conv2d: creating a tensor descriptor");
  TensorDesc desc(raw);
  ALLOY_CUDA_CHECK(
      cudnnSetTensor4dDescriptor(raw, cudnn_format(layout), cudnn_type(dtype), n, c, h, w),
      "conv2d: describing a ", dtype_name(dtype), "[", n, ", ", c, ", ", h, ", ", w, "] ",
      layout_name(layout), " tensor");
  return desc;
}

FilterDesc filter_desc(DType dtype, const Conv2dGeometry& g) {
  cudnnFilterDescriptor_t raw = nullptr;
  ALLOY_CUDA_CHECK(cudnnCreateFilterDescriptor(&raw), "conv2d: creating a filter descriptor");
  FilterDesc desc(raw);
  // Channels-last convolutions take KRSC filters: cuDNN's NHWC kernels want both operands so.
  ALLOY_CUDA_CHECK(cudnnSetFilter4dDescriptor(raw, cudnn_type(dtype), cudnn_format(g.layout),
                                              g.filters, g.channels, g.kernel_h, g.kernel_w),
                   "conv2d: describing a ", dtype_name(dtype), "[", g.filters, ", ", g.channels,
                   ", ", g.kernel_h, ", ", g.kernel_w, "] ",
                   g.layout == Layout::nhwc ? "KRSC" : "KCRS", " filter");
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

const char* math_name(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_DEFAULT_MATH:
      return "default math";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor-op math with conversion";
    case CUDNN_FMA_MATH:
      return "FMA math";
  }
  return "unknown math";
}

const char* algo_name(cudnnConvolutionFwdAlgo_t algo) {
  return forward_algorithm_name(algo);
}
const char* algo_name(cudnnConvolutionBwdDataAlgo_t algo) {
  return data_algorithm_name(algo);
}
const char* algo_name(cudnnConvolutionBwdFilterAlgo_t algo) {
  return filter_algorithm_name(algo);
}

// cuDNN's answer for one direction, as the pure selection logic sees it (conv2d_algorithms.h).
template <class Perf>
std::vector<AlgorithmOffer> offers_of(const Perf* results, int count) {
  std::vector<AlgorithmOffer> offers;
  for (int i = 0; i < count; ++i) {
    const Perf& perf = results[i];
    offers.push_back({static_cast<int>(perf.algo), static_cast<int>(perf.mathType),
                      detail::concat(algo_name(perf.algo), " (", math_name(perf.mathType), ")"),
                      perf.status == CUDNN_STATUS_SUCCESS, perf.memory,
                      perf.determinism == CUDNN_DETERMINISTIC, perf.time});
  }
  return offers;
}

// cudnnFind*AlgorithmEx's answer: up to 16 timed algorithms.
template <class Perf, class Run>
cudnnStatus_t find_into(std::vector<AlgorithmOffer>& timed, const Run& run) {
  constexpr int kMaxResults = 16;
  Perf perf[kMaxResults];
  int found = 0;
  const cudnnStatus_t status = run(kMaxResults, &found, perf);
  if (status == CUDNN_STATUS_SUCCESS) timed = offers_of(perf, found);
  return status;
}

// One direction of a plan: its candidates until the first execution has found one that runs,
// then that algorithm, its workspace and a convolution descriptor carrying its math type.
struct Direction {
  std::vector<AlgorithmOffer> candidates;
  bool chosen = false;
  std::string name;  // the chosen algorithm's, for conv2d_algorithm_report
  int algo = 0;
  int math_type = 0;  // cuDNN's; for kDirectAlgorithm, which kernel (direct_variant)
  std::size_t workspace = 0;
  ConvDesc conv;
};

// Alloy's kernels as more candidates of a direction (conv2d_direct.h, conv2d_implicit_gemm.h):
// last in the heuristic order, so they run there only should every cuDNN algorithm fail;
// measured, they compete on time. Where a direction has several, the offer's math type (which
// cuDNN's direct kernels do not use) names the kernel (conv2d_algorithms.h).
AlgorithmOffer alloy_offer(std::size_t workspace, const char* direction, int kernel) {
  return {
      kDirectAlgorithm, kernel, alloy_kernel_name(direction, kernel), true, workspace, true, 0.0f};
}

DirectForward direct_variant(int math_type) {
  return math_type == kSplitForward ? DirectForward::split_channels : DirectForward::streaming;
}

// Everything cuDNN needs for one (dtype, shape): descriptors, and per direction the algorithm.
struct Plan {
  Plan(cudnnHandle_t handle, DType dtype, const Conv2dGeometry& g, bool tf32);

  DType dtype;
  bool tf32;  // f32 data that may run on TF32 tensor cores (--allow-tf32)
  Conv2dGeometry geometry;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc probe;  // the math type allowed: what cudnnFind*AlgorithmEx chooses within
  Direction forward, data, filter;
};

Plan::Plan(cudnnHandle_t handle, DType data_type, const Conv2dGeometry& g, bool allow_tf32)
    : dtype(data_type),
      tf32(allow_tf32),
      geometry(g),
      x(tensor_desc(data_type, g.layout, g.batch, g.channels, g.height, g.width)),
      y(tensor_desc(data_type, g.layout, g.batch, g.filters, g.out_h, g.out_w)),
      w(filter_desc(data_type, g)) {
  // Tensor cores for half data, and for f32 data with --allow-tf32 (TF32); else true fp32 (FMA).
  const cudnnMathType_t allowed =
      dtype == DType::f32 && !tf32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  probe = conv_desc(g, allowed);
  constexpr int kMaxResults = 16;
  int found = 0;

  // Heuristics only: nothing runs, so a plan may be made during a graph capture.
  cudnnConvolutionFwdAlgoPerf_t forward_perf[kMaxResults];
  ALLOY_CUDA_CHECK(
      cudnnGetConvolutionForwardAlgorithm_v7(handle, x.get(), w.get(), probe.get(), y.get(),
                                             kMaxResults, &found, forward_perf),
      "conv2d: choosing a forward algorithm");
  forward.candidates = algorithm_candidates(offers_of(forward_perf, found), false, kWorkspaceLimit);

  cudnnConvolutionBwdDataAlgoPerf_t data_perf[kMaxResults];
  ALLOY_CUDA_CHECK(
      cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w.get(), y.get(), probe.get(), x.get(),
                                                  kMaxResults, &found, data_perf),
      "conv2d: choosing a backward-data algorithm");
  // The backward passes prefer deterministic algorithms, so reruns give equal bits.
  data.candidates = algorithm_candidates(offers_of(data_perf, found), true, kWorkspaceLimit);

  cudnnConvolutionBwdFilterAlgoPerf_t filter_perf[kMaxResults];
  ALLOY_CUDA_CHECK(
      cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x.get(), y.get(), probe.get(), w.get(),
                                                    kMaxResults, &found, filter_perf),
      "conv2d: choosing a backward-filter algorithm");
  filter.candidates = algorithm_candidates(offers_of(filter_perf, found), true, kWorkspaceLimit);

  if (conv2d_direct_supports(g, dtype, ConvDirection::forward))
    forward.candidates.push_back(alloy_offer(0, "forward", kStreamingForward));
  if (conv2d_direct_splits(g, dtype))
    forward.candidates.push_back(alloy_offer(0, "forward", kSplitForward));
  if (conv2d_igemm_supports(g, dtype, ConvDirection::forward))
    forward.candidates.push_back(alloy_offer(0, "forward", kImplicitGemmForward));
  if (conv2d_direct_supports(g, dtype, ConvDirection::data))
    data.candidates.push_back(alloy_offer(conv2d_direct_data_workspace(g, dtype), "data", 0));
  if (conv2d_direct_supports(g, dtype, ConvDirection::filter))
    filter.candidates.push_back(
        alloy_offer(conv2d_direct_filter_workspace(g), "filter", kDirectFilter));
  if (conv2d_igemm_supports(g, dtype, ConvDirection::filter)) {
    filter.candidates.push_back(
        alloy_offer(conv2d_igemm_filter_workspace(g), "filter", kImplicitGemmFilter));
  }
}

// "forward of f16 x [8, 1, 28, 28] with 6 filters 5x5, stride 1x1, padding 2x2" (NCHW sizes),
// then ", channels-last" for an NHWC one.
std::string describe(const char* direction, DType dtype, const Conv2dGeometry& g) {
  return detail::concat(direction, " of ", dtype_name(dtype), " x [", g.batch, ", ", g.channels,
                        ", ", g.height, ", ", g.width, "] with ", g.filters, " filters ",
                        g.kernel_h, "x", g.kernel_w, ", stride ", g.params.stride_h, "x",
                        g.params.stride_w, ", padding ", g.params.pad_h, "x", g.params.pad_w,
                        g.layout == Layout::nhwc ? ", channels-last" : "");
}

// What one cuDNN call of a direction needs: the algorithm, its convolution descriptor and a
// workspace of at least its size. `trial` is true while the first execution is trying
// candidates: a direction that accumulates into its output (beta = 1) then writes a scratch
// output instead, since a failed attempt may have written part of it.
struct Choice {
  int algo;
  int math_type;
  cudnnConvolutionDescriptor_t conv;
  void* workspace;
  std::size_t workspace_bytes;
  bool trial;
};

// cudnnFind*AlgorithmEx of one direction on the real buffers, given a workspace: its status,
// and its timed results in `timed`.
using FindCall = std::function<cudnnStatus_t(void* workspace, std::size_t workspace_bytes,
                                             std::vector<AlgorithmOffer>& timed)>;

// One call of a direction with a chosen algorithm: cuDNN's status (ours run or throw).
using DirectionCall = std::function<cudnnStatus_t(const Choice&)>;

// Runs a timing averages, after one warm-up run.
constexpr int kTimedRuns = 3;

// How many of cudnnFind's fastest offers are timed again beside Alloy's direct kernels.
constexpr std::size_t kMeasuredContenders = 3;

// The milliseconds one call of `offer` takes on the real buffers, timed with events; a trial
// call, so an accumulating direction writes its scratch output. Alloy's direct kernels and the
// cuDNN algorithms cudnnFind timed fastest are all timed this way before one is chosen: Find's
// own figures are taken differently, and compared with ours they misplaced the direct kernels
// (LeNet's, docs/PERFORMANCE.md). The host's wait for the end event is not counted
// among the step's host waits (core/round_trips.h), as cudnnFind's own waits are not: both are
// the first execution's one-off measurement, not a cost of the step.
float time_offer(const AlgorithmOffer& offer, const Plan& plan, void* workspace, Device device,
                 cudaStream_t stream, const DirectionCall& call) {
  const ConvDesc conv = conv_desc(plan.geometry, static_cast<cudnnMathType_t>(offer.math_type));
  const Choice choice{offer.algo, offer.math_type, conv.get(), workspace, offer.workspace, true};
  if (call(choice) != CUDNN_STATUS_SUCCESS) {
    static_cast<void>(cudaGetLastError());  // a refused launch is not this op's failure
    return std::numeric_limits<float>::infinity();
  }
  Event start(device.index, true), end(device.index, true);
  start.record(stream);
  for (int run = 0; run < kTimedRuns; ++run)
    ALLOY_CUDA_CHECK(call(choice), "conv2d: timing algorithm ", offer.name);
  end.record(stream);
  ALLOY_CUDA_CHECK(cudaEventSynchronize(end.get()), "conv2d: waiting to time ", offer.name);
  return end.elapsed_ms_since(start) / kTimedRuns;
}

// The key of a direction's choice in the algorithm db: this GPU's name and cuDNN's version.
ConvAlgorithmKey algorithm_key(const Plan& plan, const char* direction, Device device) {
  cudaDeviceProp properties{};
  ALLOY_CUDA_CHECK(cudaGetDeviceProperties(&properties, device.index), "conv2d: naming ",
                   device.str());
  return {properties.name, static_cast<long>(cudnnGetVersion()),
          plan.dtype,      plan.geometry,
          direction,       plan.tf32};
}

// --conv-algorithms measured: puts the direction's fastest candidate first. The choice a
// resumed checkpoint or the algorithm db holds for this GPU, cuDNN and shape is taken as it is
// (reruns then run the same algorithms, so give equal bits); otherwise cudnnFind*AlgorithmEx
// times the candidates, with a workspace as large as the largest of them needs; its fastest
// kMeasuredContenders (deterministic for the backward passes) and Alloy's direct kernels, where
// they are candidates, are then timed again alike (time_offer) and the fastest is recorded.
// Find's own ranking is not the last word: it has ranked cuDNN's FFT above its Winograd for
// LeNet's second input gradient, where the FFT then ran half again as long as the Winograd
// (docs/PERFORMANCE.md). Should Find fail or time none, the heuristic order stays.
void put_measured_first(Direction& direction, const Plan& plan, const char* key_direction,
                        Device device, cudaStream_t stream, const std::string& what,
                        const FindCall& find, const DirectionCall& call) {
  if (direction.candidates.empty()) return;
  const ConvAlgorithmKey key = algorithm_key(plan, key_direction, device);
  std::optional<std::size_t> index;
  if (const std::optional<ConvAlgorithm> known = known_conv_algorithm(key)) {
    index = candidate_index(direction.candidates, known->algo, known->math_type);
    if (!index) {
      std::cerr << "alloy: warning: " << what << ": the recorded algorithm " << known->algo
                << " (math type " << known->math_type
                << ") is not among cuDNN's candidates here; using the heuristic order" << std::endl;
    }
  } else {
    std::size_t workspace_bytes = 0;
    for (const AlgorithmOffer& offer : direction.candidates)
      workspace_bytes = std::max(workspace_bytes, offer.workspace);
    DeviceBuffer workspace;
    try {
      workspace = DeviceBuffer(workspace_bytes, device, MemoryCategory::workspace);
    } catch (const OutOfMemory&) {
      return;  // too little memory to time them all: the heuristic order, unrecorded
    }
    std::vector<AlgorithmOffer> timed;
    if (find(workspace.get(), workspace_bytes, timed) == CUDNN_STATUS_SUCCESS) {
      const bool deterministic = std::string(key_direction) != "forward";
      std::vector<std::size_t> contenders = fastest_candidates(
          direction.candidates, timed, deterministic, kWorkspaceLimit, kMeasuredContenders);
      for (std::size_t i = 0; i < direction.candidates.size(); ++i) {
        if (direction.candidates[i].algo == kDirectAlgorithm) contenders.push_back(i);
      }
      if (contenders.size() == 1) {
        index = contenders.front();
      } else if (contenders.size() > 1) {
        float best_ms = std::numeric_limits<float>::infinity();
        for (const std::size_t i : contenders) {
          const float ms =
              time_offer(direction.candidates[i], plan, workspace.get(), device, stream, call);
          if (!index || ms < best_ms) index = i, best_ms = ms;
        }
      }
    } else {
      static_cast<void>(cudaGetLastError());  // a refused launch is not this op's failure
    }
    if (index) {
      // Another rank of this node may have recorded its own choice first: that one, so that
      // the ranks run the same algorithms.
      const AlgorithmOffer& measured = direction.candidates[*index];
      const ConvAlgorithm kept = record_conv_algorithm(key, {measured.algo, measured.math_type});
      index = candidate_index(direction.candidates, kept.algo, kept.math_type).value_or(*index);
    }
  }
  if (index) direction.candidates = put_first(std::move(direction.candidates), *index);
}

// Runs one direction of a plan: `call(choice)` issues the cuDNN call and returns its status.
// The first execution (outside any graph capture: a failed attempt must not end up in a graph)
// orders the candidates by measurement when --conv-algorithms is measured (`find`,
// `key_direction`: forward, data or filter), then tries them in order and keeps the first that
// runs; when none does, the error names the direction, dtype, shape and every algorithm tried.
// A direction whose trial wrote a scratch output (`accumulates`) then runs for real with the
// chosen algorithm.
void execute(Direction& direction, const Plan& plan, const char* name, const char* key_direction,
             Device device, cudaStream_t stream, bool accumulates, const DirectionCall& call,
             const FindCall& find) {
  const auto what = [&] { return "conv2d " + describe(name, plan.dtype, plan.geometry); };
  if (!direction.chosen) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    ALLOY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture), "conv2d: asking whether ",
                     device.str(), "'s stream is capturing");
    ALLOY_CHECK(capture == cudaStreamCaptureStatusNone, what(),
                ": its first execution chooses among cuDNN's algorithms by running them, which "
                "a CUDA-graph capture cannot hold; run the step eagerly once first (a warm-up "
                "step does)");
    if (conv_algorithm_choice() == ConvAlgorithmChoice::measured)
      put_measured_first(direction, plan, key_direction, device, stream, what(), find, call);
    int out_of_memory = 0;  // candidates whose workspace the device could not hold
    const auto attempt = [&](const AlgorithmOffer& offer) {
      const ConvDesc conv = conv_desc(plan.geometry, static_cast<cudnnMathType_t>(offer.math_type));
      DeviceBuffer workspace;
      try {
        workspace = DeviceBuffer(offer.workspace, device, MemoryCategory::workspace);
      } catch (const Error& error) {
        out_of_memory += dynamic_cast<const OutOfMemory*>(&error) != nullptr;
        return detail::concat("its ", offer.workspace, "-byte workspace: ", error.what());
      }
      const cudnnStatus_t status =
          call({offer.algo, offer.math_type, conv.get(), workspace.get(), offer.workspace, true});
      if (status == CUDNN_STATUS_SUCCESS) return std::string();
      // A refused launch leaves its error as the thread's last one: not this op's failure.
      static_cast<void>(cudaGetLastError());
      return status_text(status);
    };
    std::size_t index = 0;
    try {
      index = first_working_algorithm(direction.candidates, what(), attempt);
    } catch (const Error& error) {
      // With more memory an algorithm might have run: the op does not fit (alloy mem
      // --max-batch tells this from other failures).
      if (out_of_memory > 0) throw OutOfMemory(error.what());
      throw;
    }
    const AlgorithmOffer& offer = direction.candidates[index];
    direction.name = offer.name;
    direction.algo = offer.algo;
    direction.math_type = offer.math_type;
    direction.workspace = offer.workspace;
    direction.conv = conv_desc(plan.geometry, static_cast<cudnnMathType_t>(offer.math_type));
    direction.chosen = true;
    direction.candidates.clear();
    if (!accumulates) return;  // the trial that worked was the real call
  }
  const DeviceBuffer workspace(direction.workspace, device, MemoryCategory::workspace);
  ALLOY_CUDA_CHECK(call({direction.algo, direction.math_type, direction.conv.get(), workspace.get(),
                         direction.workspace, false}),
                   what(), " (algorithm ", direction.algo, ")");
}

using PlanKey =
    std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, bool>;

struct PlanCache {
  std::mutex mutex;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};

PlanCache& plan_cache() {
  static PlanCache cache;
  return cache;
}

// The plan of a (device, dtype, shape). Plans are used by the device's one host thread (every
// op of a device is issued from the thread that drives its stream), so a plan's first
// execution, which settles its algorithms, needs no lock of its own.
Plan& plan_for(Device device, cudnnHandle_t handle, DType dtype, const Conv2dGeometry& g) {
  const bool tf32 = dtype == DType::f32 && allow_tf32();
  const PlanKey key{device.index,
                    static_cast<int>(dtype),
                    g.batch,
                    g.channels,
                    g.height,
                    g.width,
                    g.filters,
                    g.kernel_h,
                    g.kernel_w,
                    g.params.stride_h,
                    g.params.stride_w,
                    g.params.pad_h,
                    g.params.pad_w,
                    g.out_h,
                    static_cast<int>(g.layout),
                    tf32};
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto& slot = cache.plans[key];
  if (!slot) slot = std::make_unique<Plan>(handle, dtype, g, tf32);
  return *slot;
}

// y[n, c, p] = y[n, c, p] + b[c], added in fp32 and rounded once into y's dtype: the bias after
// cuDNN's convolution. The project's kernel rather than cudnnAddTensor, which cuDNN 9 deprecates
// and whose legacy data-type support does not list bf16: every dtype, one launch, and each
// element one load, one add and one store, so deterministic. It runs over a piece of whole
// images (for_each_piece), in 16-byte packs when `packed` (the piece aligned to a pack, planes
// of at least a pack: a pack then touches one plane or two neighbours) and one element at a time
// after the last pack or otherwise; each pack or element finds its channel with two
// multiply-high divisions.
template <class T>
__global__ void bias_add_kernel(T* y, const T* b, IntDivider plane, IntDivider channels,
                                unsigned int count, bool packed) {
  constexpr unsigned int n = kPackSize<T>;
  unsigned int first = 0;
  if (packed) {
    ALLOY_GRID_STRIDE_32(p, count / n) {
      const IntDivider::QuotientRemainder place = plane.divmod(p * n);
      const unsigned int c = channels.divmod(place.quotient).remainder;
      const float bias = widen(b[c]);
      const bool straddles = place.remainder + n > plane.divisor();
      const float next_bias = straddles ? widen(b[c + 1 == channels.divisor() ? 0 : c + 1]) : bias;
      Pack<T, n> values = reinterpret_cast<const Pack<T, n>*>(y)[p];
      for (unsigned int j = 0; j < n; ++j) {
        const float add = place.remainder + j < plane.divisor() ? bias : next_bias;
        values.v[j] = narrow<T>(__fadd_rn(widen(values.v[j]), add));
      }
      reinterpret_cast<Pack<T, n>*>(y)[p] = values;
    }
    first = count / n * n;
  }
  ALLOY_GRID_STRIDE_32(k, count - first) {
    const unsigned int i = first + k;
    const float bias = widen(b[channels.divmod(plane.divide(i)).remainder]);
    y[i] = narrow<T>(__fadd_rn(widen(y[i]), bias));
  }
}

// The bias of every output channel, added to y in one launch (one per 2^31 elements).
void add_bias(void* y, const void* b, DType dtype, std::int64_t batch, std::int64_t channels,
              std::int64_t plane, cudaStream_t stream) {
  const std::int64_t image = channels * plane;
  if (batch * image == 0) return;
  dispatch_floating(dtype, "conv2d_forward", [&](auto type) {
    using T = decltype(type);
    constexpr int n = kPackSize<T>;
    for_each_piece(batch, image, "conv2d_forward", [&](std::int64_t first, std::int64_t images) {
      T* const out = static_cast<T*>(y) + first * image;
      const std::int64_t count = images * image;
      const bool packed = plane >= n && packs_aligned(out);
      ALLOY_LAUNCH(bias_add_kernel, grid_for(packed ? std::max(count / n, count % n) : count),
                   kThreads, 0, stream)
      (out, static_cast<const T*>(b), IntDivider(static_cast<std::uint32_t>(plane)),
       IntDivider(static_cast<std::uint32_t>(channels)), static_cast<unsigned int>(count), packed);
      ALLOY_CUDA_CHECK_LAUNCH("conv2d bias_add_kernel over ", channels, " channels of ", images,
                              " images of ", plane, " values");
    });
  });
}

// The fp32 sum of dy over (n, p, q) per output channel, added into db: one block per (chunk,
// channel) (channel_reduce.cuh); with several chunks, the partials are summed in chunk order by
// the grid's last block.
template <class T, int V>
__global__ void bias_grad_kernel(const T* dy, ChannelSplit s, float* partials, void* db,
                                 DType db_dtype, unsigned int* arrivals, Width<V>) {
  constexpr int U = kWideBatch<V>;
  const unsigned int chunk = blockIdx.x;
  const std::int64_t c = blockIdx.y;
  float sum = 0.0f;
  for_chunk_values<V, U>(dy, s, chunk, c, [&](float value) { sum += value; });
  sum = block_sum(sum);
  if (gridDim.x == 1) {
    if (threadIdx.x == 0) store_any(db, db_dtype, c, load_any(db, db_dtype, c) + sum);
    return;
  }
  if (threadIdx.x == 0) partials[c * gridDim.x + chunk] = sum;
  if (!arrive_last(arrivals)) return;
  for (std::int64_t channel = threadIdx.x; channel < s.channels; channel += blockDim.x) {
    float total = 0.0f;
    for_channel_partials<1>(partials, channel,
                            [&](unsigned int, const float(&partial)[1]) { total += partial[0]; });
    store_any(db, db_dtype, channel, load_any(db, db_dtype, channel) + total);
  }
}

// The channels-last bias: y[r, c] = y[r, c] + b[c] over rows of `channels` values, added in fp32
// and rounded once like bias_add_kernel. Packs of 16 bytes when `packed` (y aligned to one);
// a pack's channels run on from its first, wrapping at the end of a row.
template <class T>
__global__ void bias_add_rows_kernel(T* y, const T* b, IntDivider channels, unsigned int count,
                                     bool packed) {
  constexpr unsigned int n = kPackSize<T>;
  unsigned int first = 0;
  if (packed) {
    ALLOY_GRID_STRIDE_32(p, count / n) {
      unsigned int c = channels.divmod(p * n).remainder;
      Pack<T, n> values = reinterpret_cast<const Pack<T, n>*>(y)[p];
      for (unsigned int j = 0; j < n; ++j) {
        values.v[j] = narrow<T>(__fadd_rn(widen(values.v[j]), widen(b[c])));
        if (++c == channels.divisor()) c = 0;
      }
      reinterpret_cast<Pack<T, n>*>(y)[p] = values;
    }
    first = count / n * n;
  }
  ALLOY_GRID_STRIDE_32(k, count - first) {
    const unsigned int i = first + k;
    y[i] = narrow<T>(__fadd_rn(widen(y[i]), widen(b[channels.divmod(i).remainder])));
  }
}

void add_bias_rows(void* y, const void* b, DType dtype, std::int64_t rows, std::int64_t channels,
                   cudaStream_t stream) {
  if (rows * channels == 0) return;
  dispatch_floating(dtype, "conv2d_forward", [&](auto type) {
    using T = decltype(type);
    constexpr int n = kPackSize<T>;
    for_each_piece(rows, channels, "conv2d_forward", [&](std::int64_t first, std::int64_t count) {
      T* const out = static_cast<T*>(y) + first * channels;
      const std::int64_t elements = count * channels;
      const bool packed = packs_aligned(out);
      ALLOY_LAUNCH(bias_add_rows_kernel,
                   grid_for(packed ? std::max(elements / n, elements % n) : elements), kThreads, 0,
                   stream)
      (out, static_cast<const T*>(b), IntDivider(static_cast<std::uint32_t>(channels)),
       static_cast<unsigned int>(elements), packed);
      ALLOY_CUDA_CHECK_LAUNCH("conv2d bias_add_rows_kernel over ", count, " rows of ", channels,
                              " channels");
    });
  });
}

constexpr int kColumnTile = 32;  // channels per block of bias_grad_rows_kernel
constexpr int kRowLanes = 32;    // threads of a block that split the rows

// The channels-last bias gradient: db[c] += the fp32 sum of dy[r, c] over all rows. A block
// takes 32 channels (consecutive threads read consecutive channels of a row); its 32 lanes per
// channel sum every 32nd row, and the lanes' sums are added in lane order: deterministic. Simple
// rather than fast: convolution biases are rare in the channels-last models.
template <class T>
__global__ void bias_grad_rows_kernel(const T* dy, std::int64_t rows, int channels, void* db,
                                      DType db_dtype) {
  __shared__ float partial[kRowLanes][kColumnTile + 1];
  const int c = blockIdx.x * kColumnTile + threadIdx.x;
  float sum = 0.0f;
  if (c < channels) {
    for (std::int64_t r = threadIdx.y; r < rows; r += kRowLanes)
      sum += widen(dy[r * channels + c]);
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= channels) return;
  float total = 0.0f;
  for (int lane = 0; lane < kRowLanes; ++lane)
    total += partial[lane][threadIdx.x];
  store_any(db, db_dtype, c, load_any(db, db_dtype, c) + total);
}

// A KRSC copy of the KCRS filter w, in a workspace: K images of [C, RS] transposed.
DeviceBuffer krsc_copy(const void* w, DType dtype, const Conv2dGeometry& g, Device device,
                       cudaStream_t stream) {
  const std::int64_t taps = std::int64_t{g.kernel_h} * g.kernel_w;
  DeviceBuffer copy(static_cast<std::size_t>(g.filters * g.channels * taps) * dtype_size(dtype),
                    device, MemoryCategory::workspace);
  transpose_images(w, copy.get(), dtype_size(dtype), g.filters, g.channels, taps, stream);
  return copy;
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

std::string conv2d_algorithm_report(Device device) {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  std::string report;
  for (const auto& [key, plan] : cache.plans) {
    if (std::get<0>(key) != device.index) continue;
    report += describe("conv2d", plan->dtype, plan->geometry) + (plan->tf32 ? ", TF32" : "") + ":";
    for (const auto& [what, direction] :
         {std::pair<const char*, const Direction*>{"forward", &plan->forward},
          {"input gradient", &plan->data},
          {"filter gradient", &plan->filter}}) {
      report += detail::concat(" ", what, " ",
                               direction->chosen ? direction->name : std::string("(not run)"), ";");
    }
    report += "\n";
  }
  return report;
}

ConvCandidates conv2d_candidates(Device device, DType dtype, const Conv2dGeometry& g,
                                 const std::string& direction) {
  ALLOY_CHECK(direction == "forward" || direction == "data" || direction == "filter",
              "conv2d_candidates: direction '", direction, "' is not forward, data or filter");
  const Plan plan(context(device).cudnn.get(), dtype, g, dtype == DType::f32 && allow_tf32());
  const Direction& chosen = direction == "forward" ? plan.forward
                            : direction == "data"  ? plan.data
                                                   : plan.filter;
  return {algorithm_key(plan, direction.c_str(), device), chosen.candidates};
}

void conv2d_forget_plans(Device device) {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  for (auto it = cache.plans.begin(); it != cache.plans.end();)
    it = std::get<0>(it->first) == device.index ? cache.plans.erase(it) : std::next(it);
}

void conv2d_forward(Device device, const Conv2dGeometry& g, DType dtype, const void* x,
                    const void* w, const void* b, void* y) {
  DeviceContext& ctx = context(device);
  const cudaStream_t stream = ctx.stream.get();
  Plan& plan = plan_for(device, ctx.cudnn.get(), dtype, g);
  const float one = 1.0f, zero = 0.0f;
  const cudnnHandle_t handle = ctx.cudnn.get();
  const bool nhwc = g.layout == Layout::nhwc;
  const DeviceBuffer w_krsc = nhwc ? krsc_copy(w, dtype, g, device, stream) : DeviceBuffer();
  const void* filter = nhwc ? w_krsc.get() : w;
  execute(
      plan.forward, plan, "forward", "forward", device, stream, false,
      [&](const Choice& c) {
        if (c.algo == kDirectAlgorithm && c.math_type == kImplicitGemmForward) {
          conv2d_igemm_forward(g, dtype, x, w, b, y, stream);
          return CUDNN_STATUS_SUCCESS;
        }
        if (c.algo == kDirectAlgorithm) {
          conv2d_direct_forward(g, dtype, x, w, b, y, stream, direct_variant(c.math_type));
          return CUDNN_STATUS_SUCCESS;
        }
        return cudnnConvolutionForward(handle, &one, plan.x.get(), x, plan.w.get(), filter, c.conv,
                                       static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), c.workspace,
                                       c.workspace_bytes, &zero, plan.y.get(), y);
      },
      [&](void* workspace, std::size_t bytes, std::vector<AlgorithmOffer>& timed) {
        return find_into<cudnnConvolutionFwdAlgoPerf_t>(timed, [&](int n, int* found, auto* perf) {
          return cudnnFindConvolutionForwardAlgorithmEx(handle, plan.x.get(), x, plan.w.get(),
                                                        filter, plan.probe.get(), plan.y.get(), y,
                                                        n, found, perf, workspace, bytes);
        });
      });
  // Alloy's kernels add the bias themselves.
  if (b == nullptr || plan.forward.algo == kDirectAlgorithm) return;
  const std::int64_t plane = std::int64_t{g.out_h} * g.out_w;
  if (nhwc) {
    add_bias_rows(y, b, dtype, g.batch * plane, g.filters, stream);
  } else {
    add_bias(y, b, dtype, g.batch, g.filters, plane, stream);
  }
}

void conv2d_backward(Device device, const Conv2dGeometry& g, DType dtype, const void* x,
                     const void* w, const void* dy, void* dw, DType dw_dtype, void* db,
                     DType db_dtype, void* dx) {
  DeviceContext& ctx = context(device);
  const cudnnHandle_t handle = ctx.cudnn.get();
  const cudaStream_t stream = ctx.stream.get();
  const float one = 1.0f, zero = 0.0f;
  const bool nhwc = g.layout == Layout::nhwc;
  const std::int64_t taps = std::int64_t{g.kernel_h} * g.kernel_w;

  // dw += dL/dw (beta = 1). The first execution tries its algorithms on a scratch output, since a
  // failed attempt may have written part of it; dw is then written once, by the one chosen.
  // Channels-last: cuDNN writes a KRSC gradient (beta = 0, so every attempt may write it) into
  // a workspace, added into the KCRS dw by a transposing add.
  const auto filter_gradient = [&](Plan& plan, const void* x_data, const void* dy_data,
                                   const char* what) {
    const std::size_t dw_bytes = static_cast<std::size_t>(g.filters) * g.channels * g.kernel_h *
                                 g.kernel_w * dtype_size(plan.dtype);
    if (nhwc) {
      // cuDNN writes the KRSC gradient (beta = 0), which is then added into the KCRS dw.
      const DeviceBuffer krsc(dw_bytes, device, MemoryCategory::workspace);
      execute(
          plan.filter, plan, what, "filter", device, stream, false,
          [&](const Choice& c) {
            return cudnnConvolutionBackwardFilter(
                handle, &one, plan.x.get(), x_data, plan.y.get(), dy_data, c.conv,
                static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), c.workspace,
                c.workspace_bytes, &zero, plan.w.get(), krsc.get());
          },
          [&](void* workspace, std::size_t bytes, std::vector<AlgorithmOffer>& timed) {
            return find_into<cudnnConvolutionBwdFilterAlgoPerf_t>(
                timed, [&](int n, int* found, auto* perf) {
                  return cudnnFindConvolutionBackwardFilterAlgorithmEx(
                      handle, plan.x.get(), x_data, plan.y.get(), dy_data, plan.probe.get(),
                      plan.w.get(), krsc.get(), n, found, perf, workspace, bytes);
                });
          });
      transpose_images_add(krsc.get(), dw, plan.dtype, g.filters, taps, g.channels, stream);
      return;
    }
    DeviceBuffer scratch;
    const auto scratch_output = [&] {
      if (scratch.get() == nullptr)
        scratch = DeviceBuffer(dw_bytes, device, MemoryCategory::workspace);
      return scratch.get();
    };
    execute(
        plan.filter, plan, what, "filter", device, stream, true,
        [&](const Choice& c) {
          if (c.algo == kDirectAlgorithm && c.math_type == kImplicitGemmFilter) {
            conv2d_igemm_filter(g, plan.dtype, x_data, dy_data, c.trial ? scratch_output() : dw,
                                !c.trial, c.workspace, c.workspace_bytes, stream);
            return CUDNN_STATUS_SUCCESS;
          }
          if (c.algo == kDirectAlgorithm) {
            conv2d_direct_filter(g, plan.dtype, x_data, dy_data, c.trial ? scratch_output() : dw,
                                 !c.trial, c.workspace, c.workspace_bytes, stream);
            return CUDNN_STATUS_SUCCESS;
          }
          return cudnnConvolutionBackwardFilter(
              handle, &one, plan.x.get(), x_data, plan.y.get(), dy_data, c.conv,
              static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), c.workspace, c.workspace_bytes,
              c.trial ? &zero : &one, plan.w.get(), c.trial ? scratch_output() : dw);
        },
        [&](void* workspace, std::size_t bytes, std::vector<AlgorithmOffer>& timed) {
          // Find overwrites its output: the scratch one, since dw accumulates.
          void* const output = scratch_output();
          return find_into<cudnnConvolutionBwdFilterAlgoPerf_t>(
              timed, [&](int n, int* found, auto* perf) {
                return cudnnFindConvolutionBackwardFilterAlgorithmEx(
                    handle, plan.x.get(), x_data, plan.y.get(), dy_data, plan.probe.get(),
                    plan.w.get(), output, n, found, perf, workspace, bytes);
              });
        });
  };
  if (dw_dtype == dtype) {
    filter_gradient(plan_for(device, handle, dtype, g), x, dy, "filter gradient");
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
    filter_gradient(plan_for(device, handle, DType::f32, g), x32.get(), dy32.get(),
                    "fp32 filter gradient of half data");
  }

  if (db != nullptr && nhwc) {
    const std::int64_t rows = std::int64_t{g.batch} * g.out_h * g.out_w;
    dispatch_floating(dtype, "conv2d_backward", [&](auto type) {
      using T = decltype(type);
      ALLOY_LAUNCH(bias_grad_rows_kernel, (g.filters + kColumnTile - 1) / kColumnTile,
                   dim3(kColumnTile, kRowLanes), 0, stream)
      (static_cast<const T*>(dy), rows, g.filters, db, db_dtype);
    });
    ALLOY_CUDA_CHECK_LAUNCH("conv2d bias_grad_rows_kernel over ", rows, " rows of ", g.filters,
                            " channels");
  } else if (db != nullptr) {
    const std::int64_t plane = std::int64_t{g.out_h} * g.out_w;
    const ChannelSplit split = split_for_reduction(g.batch, g.filters, plane, "conv2d_backward");
    const DeviceBuffer partials =
        split.chunks > 1 ? reduction_workspace(sizeof(float) * split.chunks * g.filters)
                         : DeviceBuffer();
    unsigned int* arrivals =
        split.chunks > 1 ? arrival_counter(ArrivalSlot::channel_sums) : nullptr;
    int width = 1;
    dispatch_floating(dtype, "conv2d_backward", [&](auto type) {
      using T = decltype(type);
      width = plane_vector_width(plane, 16 / sizeof(T), {{dy, sizeof(T)}});
      dispatch_width<16 / sizeof(T)>(width, [&](auto v) {
        ALLOY_LAUNCH(bias_grad_kernel, channel_grid(split), kThreads, 0, stream)
        (static_cast<const T*>(dy), split, partials.as<float>(), db, db_dtype, arrivals, v);
      });
    });
    ALLOY_CUDA_CHECK_LAUNCH("conv2d bias_grad_kernel over ", g.filters, " channels in ",
                            split.chunks, " chunks of ", width, "-value vectors");
  }

  if (dx != nullptr) {
    Plan& plan = plan_for(device, handle, dtype, g);
    const DeviceBuffer w_krsc = nhwc ? krsc_copy(w, dtype, g, device, stream) : DeviceBuffer();
    const void* filter = nhwc ? w_krsc.get() : w;
    execute(
        plan.data, plan, "input gradient", "data", device, stream, false,
        [&](const Choice& c) {
          if (c.algo == kDirectAlgorithm) {
            conv2d_direct_data(g, dtype, w, dy, dx, c.workspace, c.workspace_bytes, stream);
            return CUDNN_STATUS_SUCCESS;
          }
          return cudnnConvolutionBackwardData(
              handle, &one, plan.w.get(), filter, plan.y.get(), dy, c.conv,
              static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), c.workspace, c.workspace_bytes,
              &zero, plan.x.get(), dx);
        },
        [&](void* workspace, std::size_t bytes, std::vector<AlgorithmOffer>& timed) {
          return find_into<cudnnConvolutionBwdDataAlgoPerf_t>(
              timed, [&](int n, int* found, auto* perf) {
                return cudnnFindConvolutionBackwardDataAlgorithmEx(
                    handle, plan.w.get(), filter, plan.y.get(), dy, plan.probe.get(), plan.x.get(),
                    dx, n, found, perf, workspace, bytes);
              });
        });
  }
}

}  // namespace alloy::cuda
