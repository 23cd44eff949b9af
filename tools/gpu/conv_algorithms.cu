// Which cuDNN convolution algorithm is fastest for the shapes Alloy's models run, against the
// one conv2d chooses from cuDNN's heuristics (core/ops/cuda/conv2d_algorithms.h): for each
// shape, dtype, layout and direction it times every algorithm with cudnnFind*AlgorithmEx (the
// best of three finds) and prints one line. A measurement tool for a GPU machine, not a test.
//
//   conv_algorithms [--batch N] [--model lenet|resnet18]
//
// --model keeps one model's shapes (a profiler run then stops after them).
// Columns: the heuristic choice and its time, the fastest deterministic algorithm and the
// fastest of all, in milliseconds, and last the time of Alloy's own direct kernels
// (core/ops/cuda/conv2d_direct.h; "-" where conv2d_direct_supports declines the convolution,
// e.g. every NHWC row), the best of as many event-timed runs as there are finds, after one
// warm-up run, and for a forward that conv2d_direct_splits takes, the channel-split kernel's
// time too, and where conv2d_igemm_supports takes the forward or the filter gradient, the
// implicit-GEMM kernel's (core/ops/cuda/conv2d_implicit_gemm.h). NHWC rows time the same fp16
// convolutions in channels-last layout, which cuDNN's tensor-core kernels use natively (NCHW costs
// them transposes).
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/ops/cuda/conv2d_algorithms.h"
#include "core/ops/cuda/conv2d_direct.h"
#include "core/ops/cuda/conv2d_implicit_gemm.h"
#include "tools/gpu/probe_support.h"

namespace {

// Milliseconds as the report prints them.
std::string format_ms(float ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", ms);
  return text;
}

using alloy::cuda::ConvDirection;

// The finds per direction, and the timed runs of the direct kernels.
constexpr int kRounds = 3;

using alloy::probe::best_time_ms;
using alloy::probe::Buffer;
using alloy::probe::check;
using alloy::probe::device_buffer;

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(status));
}

using alloy::probe::Owned;

struct Shape {
  const char* model;
  int n, c, h, w, k, r, stride, pad;
};

struct Timing {
  std::string heuristic;
  float heuristic_ms = -1;
  std::string fastest_deterministic;
  float fastest_deterministic_ms = std::numeric_limits<float>::infinity();
  std::string fastest;
  float fastest_ms = std::numeric_limits<float>::infinity();
};

struct Pick {
  int algo = -1;
  int math = 0;
};

template <class Perf>
void fold(Timing& timing, const Perf* perf, int count, const char* (*name_of)(int), Pick pick) {
  timing.heuristic = pick.algo < 0 ? "-" : name_of(pick.algo);
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (static_cast<int>(perf[i].algo) == pick.algo &&
        static_cast<int>(perf[i].mathType) == pick.math &&
        (timing.heuristic_ms < 0 || perf[i].time < timing.heuristic_ms)) {
      timing.heuristic_ms = perf[i].time;
    }
    const std::string name = std::string(name_of(perf[i].algo)) +
                             (perf[i].mathType == CUDNN_TENSOR_OP_MATH ? "/tc" : "");
    if (perf[i].time < timing.fastest_ms) {
      timing.fastest_ms = perf[i].time;
      timing.fastest = name;
    }
    if (perf[i].determinism == CUDNN_DETERMINISTIC &&
        perf[i].time < timing.fastest_deterministic_ms) {
      timing.fastest_deterministic_ms = perf[i].time;
      timing.fastest_deterministic = name;
    }
  }
}

// conv2d's pick: its candidate order's first (the first that runs, nearly always the first).
template <class Perf>
Pick heuristic_pick(const Perf* perf, int count, bool prefer_deterministic) {
  std::vector<alloy::cuda::AlgorithmOffer> offers;
  for (int i = 0; i < count; ++i) {
    offers.push_back({static_cast<int>(perf[i].algo), static_cast<int>(perf[i].mathType), "",
                      perf[i].status == CUDNN_STATUS_SUCCESS, perf[i].memory,
                      perf[i].determinism == CUDNN_DETERMINISTIC});
  }
  const auto candidates =
      alloy::cuda::algorithm_candidates(offers, prefer_deterministic, std::size_t{1} << 30);
  if (candidates.empty()) return {};
  return {candidates.front().algo, candidates.front().math_type};
}

void measure(cudnnHandle_t handle, const Shape& s, cudnnDataType_t type, cudnnTensorFormat_t format,
             const char* label) {
  const int out_h = (s.h + 2 * s.pad - s.r) / s.stride + 1;
  const int out_w = (s.w + 2 * s.pad - s.r) / s.stride + 1;
  const std::size_t size = type == CUDNN_DATA_FLOAT ? 4 : 2;
  Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> x, y;
  Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor> w;
  Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor> conv;
  check(cudnnCreateTensorDescriptor(&x.raw), "tensor descriptor");
  check(cudnnCreateTensorDescriptor(&y.raw), "tensor descriptor");
  check(cudnnCreateFilterDescriptor(&w.raw), "filter descriptor");
  check(cudnnCreateConvolutionDescriptor(&conv.raw), "convolution descriptor");
  check(cudnnSetTensor4dDescriptor(x.raw, format, type, s.n, s.c, s.h, s.w), "x");
  check(cudnnSetTensor4dDescriptor(y.raw, format, type, s.n, s.k, out_h, out_w), "y");
  check(cudnnSetFilter4dDescriptor(w.raw, type, format, s.k, s.c, s.r, s.r), "w");
  check(cudnnSetConvolution2dDescriptor(conv.raw, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "convolution");
  check(cudnnSetConvolutionMathType(
            conv.raw, type == CUDNN_DATA_FLOAT ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
        "math type");
  const Buffer xb = device_buffer(size * s.n * s.c * s.h * s.w);
  const Buffer yb = device_buffer(size * s.n * s.k * out_h * out_w);
  const Buffer wb = device_buffer(size * s.k * s.c * s.r * s.r);
  constexpr std::size_t kWorkspace = std::size_t{1} << 30;
  const Buffer workspace = device_buffer(kWorkspace);

  constexpr int kMax = 16;
  int count = 0;
  cudnnConvolutionFwdAlgoPerf_t fp[kMax];
  cudnnConvolutionBwdDataAlgoPerf_t dp[kMax];
  cudnnConvolutionBwdFilterAlgoPerf_t wp[kMax];
  check(cudnnGetConvolutionForwardAlgorithm_v7(handle, x.raw, w.raw, conv.raw, y.raw, kMax, &count,
                                               fp),
        "heuristic forward");
  const Pick forward_pick = heuristic_pick(fp, count, false);
  check(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w.raw, y.raw, conv.raw, x.raw, kMax,
                                                    &count, dp),
        "heuristic backward data");
  const Pick data_pick = heuristic_pick(dp, count, true);
  check(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x.raw, y.raw, conv.raw, w.raw, kMax,
                                                      &count, wp),
        "heuristic backward filter");
  const Pick filter_pick = heuristic_pick(wp, count, true);

  Timing forward, data, filter;
  for (int round = 0; round < kRounds; ++round) {
    check(cudnnFindConvolutionForwardAlgorithmEx(handle, x.raw, xb.get(), w.raw, wb.get(), conv.raw,
                                                 y.raw, yb.get(), kMax, &count, fp, workspace.get(),
                                                 kWorkspace),
          "find forward");
    fold(forward, fp, count, alloy::cuda::forward_algorithm_name, forward_pick);
    check(cudnnFindConvolutionBackwardDataAlgorithmEx(handle, w.raw, wb.get(), y.raw, yb.get(),
                                                      conv.raw, x.raw, xb.get(), kMax, &count, dp,
                                                      workspace.get(), kWorkspace),
          "find backward data");
    fold(data, dp, count, alloy::cuda::data_algorithm_name, data_pick);
    check(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, x.raw, xb.get(), y.raw, yb.get(),
                                                        conv.raw, w.raw, wb.get(), kMax, &count, wp,
                                                        workspace.get(), kWorkspace),
          "find backward filter");
    fold(filter, wp, count, alloy::cuda::filter_algorithm_name, filter_pick);
  }

  // The same buffers through Alloy's direct kernels, where they take the convolution: the
  // forward without a bias (as cuDNN's is timed), the filter gradient overwriting dw.
  const alloy::DType dtype = type == CUDNN_DATA_FLOAT ? alloy::DType::f32 : alloy::DType::f16;
  const alloy::cpu::Conv2dGeometry g{
      s.n,
      s.c,
      s.h,
      s.w,
      s.k,
      s.r,
      s.r,
      out_h,
      out_w,
      {s.stride, s.stride, s.pad, s.pad},
      format == CUDNN_TENSOR_NHWC ? alloy::Layout::nhwc : alloy::Layout::nchw};
  const std::size_t direct_workspace =
      std::max({alloy::cuda::conv2d_direct_filter_workspace(g),
                alloy::cuda::conv2d_direct_data_workspace(g, dtype),
                alloy::cuda::conv2d_igemm_filter_workspace(g)});
  const Buffer direct_workspace_buffer = device_buffer(direct_workspace);
  using alloy::cuda::DirectForward;
  const auto direct_ms = [&](ConvDirection direction,
                             DirectForward variant = DirectForward::streaming) {
    if (!alloy::cuda::conv2d_direct_supports(g, dtype, direction)) return -1.0f;
    return best_time_ms(
        [&] {
          switch (direction) {
            case ConvDirection::forward:
              alloy::cuda::conv2d_direct_forward(g, dtype, xb.get(), wb.get(), nullptr, yb.get(),
                                                 nullptr, variant);
              break;
            case ConvDirection::data:
              alloy::cuda::conv2d_direct_data(g, dtype, wb.get(), yb.get(), xb.get(),
                                              direct_workspace_buffer.get(), direct_workspace,
                                              nullptr);
              break;
            case ConvDirection::filter:
              alloy::cuda::conv2d_direct_filter(g, dtype, xb.get(), yb.get(), wb.get(), false,
                                                direct_workspace_buffer.get(), direct_workspace,
                                                nullptr);
              break;
          }
        },
        kRounds);
  };

  // The implicit-GEMM kernels, where they take the convolution (forward and filter gradient).
  const auto igemm_ms = [&](ConvDirection direction) {
    if (!alloy::cuda::conv2d_igemm_supports(g, dtype, direction)) return -1.0f;
    return best_time_ms(
        [&] {
          if (direction == ConvDirection::forward) {
            alloy::cuda::conv2d_igemm_forward(g, dtype, xb.get(), wb.get(), nullptr, yb.get(),
                                              nullptr);
          } else {
            alloy::cuda::conv2d_igemm_filter(g, dtype, xb.get(), yb.get(), wb.get(), false,
                                             direct_workspace_buffer.get(), direct_workspace,
                                             nullptr);
          }
        },
        kRounds);
  };

  const struct {
    const char* direction;
    const Timing* timing;
    float direct_ms, split_ms, igemm_ms;
  } rows[] = {{"forward", &forward, direct_ms(ConvDirection::forward),
               alloy::cuda::conv2d_direct_splits(g, dtype)
                   ? direct_ms(ConvDirection::forward, DirectForward::split_channels)
                   : -1.0f,
               igemm_ms(ConvDirection::forward)},
              {"data", &data, direct_ms(ConvDirection::data), -1.0f, -1.0f},
              {"filter", &filter, direct_ms(ConvDirection::filter), -1.0f,
               igemm_ms(ConvDirection::filter)}};
  for (const auto& row : rows) {
    const Timing* t = row.timing;
    // "direct (channels split S, implicit GEMM I)", each part where it applies.
    std::string alloy = row.direct_ms >= 0.0f ? format_ms(row.direct_ms) : "-";
    std::string variants;
    if (row.split_ms >= 0.0f) variants += "channels split " + format_ms(row.split_ms);
    if (row.igemm_ms >= 0.0f)
      variants +=
          (variants.empty() ? "" : ", ") + std::string("implicit GEMM ") + format_ms(row.igemm_ms);
    if (!variants.empty()) alloy += " (" + variants + ")";
    std::printf(
        "%-8s %-5s %-4s [%d,%d,%d,%d] k%d %dx%d s%d p%d %-7s | heuristic %-22s %8.4f | "
        "fastest det. %-22s %8.4f | fastest %-22s %8.4f | ALLOY_DIRECT %s\n",
        s.model, label, format == CUDNN_TENSOR_NHWC ? "NHWC" : "NCHW", s.n, s.c, s.h, s.w, s.k, s.r,
        s.r, s.stride, s.pad, row.direction, t->heuristic.c_str(), t->heuristic_ms,
        t->fastest_deterministic.c_str(), t->fastest_deterministic_ms, t->fastest.c_str(),
        t->fastest_ms, alloy.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 256;
  std::string model;
  for (int i = 1; i < argc; i += 2) {
    const bool has_value = i + 1 < argc;
    if (has_value && std::strcmp(argv[i], "--batch") == 0 && std::atoi(argv[i + 1]) > 0) {
      batch = std::atoi(argv[i + 1]);
    } else if (has_value && std::strcmp(argv[i], "--model") == 0 &&
               (std::strcmp(argv[i + 1], "lenet") == 0 ||
                std::strcmp(argv[i + 1], "resnet18") == 0)) {
      model = argv[i + 1];
    } else {
      std::fprintf(stderr,
                   "usage: conv_algorithms [--batch N] [--model lenet|resnet18] (at '%s')\n",
                   argv[i]);
      return 2;
    }
  }
  try {
    Owned<cudnnHandle_t, cudnnDestroy> handle;
    check(cudnnCreate(&handle.raw), "cudnnCreate");
    const Shape lenet[] = {{"lenet", batch, 1, 28, 28, 20, 3, 1, 0},
                           {"lenet", batch, 20, 13, 13, 50, 5, 1, 0}};
    const Shape resnet[] = {{"resnet18", batch, 1, 28, 28, 64, 3, 1, 1},
                            {"resnet18", batch, 64, 28, 28, 64, 3, 1, 1},
                            {"resnet18", batch, 64, 28, 28, 128, 3, 2, 1},
                            {"resnet18", batch, 64, 28, 28, 128, 1, 2, 0},
                            {"resnet18", batch, 128, 14, 14, 128, 3, 1, 1},
                            {"resnet18", batch, 128, 14, 14, 256, 3, 2, 1},
                            {"resnet18", batch, 256, 7, 7, 256, 3, 1, 1},
                            {"resnet18", batch, 256, 7, 7, 512, 3, 2, 1},
                            {"resnet18", batch, 512, 4, 4, 512, 3, 1, 1}};
    for (const Shape& s : lenet)
      if (model.empty() || model == "lenet")
        measure(handle.raw, s, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, "f32");
    for (const Shape& s : resnet) {
      if (!model.empty() && model != "resnet18") break;
      measure(handle.raw, s, CUDNN_DATA_HALF, CUDNN_TENSOR_NCHW, "f16");
      measure(handle.raw, s, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, "f16");
      measure(handle.raw, s, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, "f32");
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "conv_algorithms: %s\n", error.what());
    return 1;
  }
  return 0;
}
