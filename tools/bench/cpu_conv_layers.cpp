// Times the CPU convolution of each of a model's layers alone, forward and backward, at one
// batch size and thread count: the probe behind docs/PERFORMANCE.md's per-layer CPU figures
// (which kernel runs is conv2d's own choice: im2col, Winograd 3x3 or Winograd 5x5). A
// measurement tool, not a test.
//
//   cpu_conv_layers [--model lenet|resnet18] [--batch N] [--threads N] [--rounds N]
//
// Prints, per layer, the best of the rounds' mean times of 10 calls after 3 warm-up calls, in ms,
// and the model's total: each layer's times as often as the model runs that geometry.
// `alloy` picks OpenBLAS's kernels for the CPU itself (OPENBLAS_CORETYPE, named in its JSON
// start event as blas_core); set the same variable here to time the same kernels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/conv2d.h"
#include "core/random.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace {

using namespace alloy;

struct Layer {
  const char* name;
  Shape x, w;
  Conv2dParams params;
  bool bias;
  bool need_dx;  // the first layer's input gradient is never asked for
  int count;     // how many of the model's layers have this geometry
};

std::vector<Layer> lenet_layers(std::int64_t n) {
  return {{"lenet conv1", {n, 1, 28, 28}, {20, 1, 3, 3}, {}, true, false, 1},
          {"lenet conv2", {n, 20, 13, 13}, {50, 20, 5, 5}, {}, true, true, 1}};
}

// core/models/resnet18.cpp: a 3x3 stem, four stages of two basic blocks; every stage after the
// first opens with a stride-2 3x3 convolution beside a stride-2 1x1 shortcut. No biases.
std::vector<Layer> resnet18_layers(std::int64_t n) {
  const Conv2dParams same{1, 1, 1, 1}, down{2, 2, 1, 1}, shortcut{2, 2, 0, 0};
  return {{"stem", {n, 1, 28, 28}, {64, 1, 3, 3}, same, false, false, 1},
          {"64 28x28", {n, 64, 28, 28}, {64, 64, 3, 3}, same, false, true, 4},
          {"64->128 s2", {n, 64, 28, 28}, {128, 64, 3, 3}, down, false, true, 1},
          {"64->128 1x1", {n, 64, 28, 28}, {128, 64, 1, 1}, shortcut, false, true, 1},
          {"128 14x14", {n, 128, 14, 14}, {128, 128, 3, 3}, same, false, true, 3},
          {"128->256 s2", {n, 128, 14, 14}, {256, 128, 3, 3}, down, false, true, 1},
          {"128->256 1x1", {n, 128, 14, 14}, {256, 128, 1, 1}, shortcut, false, true, 1},
          {"256 7x7", {n, 256, 7, 7}, {256, 256, 3, 3}, same, false, true, 3},
          {"256->512 s2", {n, 256, 7, 7}, {512, 256, 3, 3}, down, false, true, 1},
          {"256->512 1x1", {n, 256, 7, 7}, {512, 256, 1, 1}, shortcut, false, true, 1},
          {"512 4x4", {n, 512, 4, 4}, {512, 512, 3, 3}, same, false, true, 3}};
}

Tensor filled(const Shape& shape, float step) {
  std::vector<float> values(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(static_cast<int>(i % 17) - 8) * step;
  return Tensor::from_floats(shape, values, DType::f32);
}

template <class Call>
double best_ms(int rounds, const Call& call) {
  constexpr int kWarmUp = 3, kCalls = 10;
  for (int i = 0; i < kWarmUp; ++i)
    call();
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i)
      call();
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count() / kCalls);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t batch = 256;
  int threads = 2, rounds = 3;
  std::string model = "lenet";
  if (argc % 2 == 0) {
    std::fprintf(stderr, "cpu_conv_layers: %s needs a value\n", argv[argc - 1]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--model") == 0) {
      model = argv[i + 1];
      if (model != "lenet" && model != "resnet18") {
        std::fprintf(stderr, "cpu_conv_layers: unknown model %s (lenet or resnet18)\n",
                     argv[i + 1]);
        return 2;
      }
      continue;
    }
    const int value = std::atoi(argv[i + 1]);
    if (value <= 0) {
      std::fprintf(stderr, "cpu_conv_layers: %s takes a positive count\n", argv[i]);
      return 2;
    }
    if (std::strcmp(argv[i], "--batch") == 0) {
      batch = value;
    } else if (std::strcmp(argv[i], "--threads") == 0) {
      threads = value;
    } else if (std::strcmp(argv[i], "--rounds") == 0) {
      rounds = value;
    } else {
      std::fprintf(stderr, "cpu_conv_layers: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  set_cpu_threads(threads);
  double total_forward = 0, total_backward = 0;
  for (const Layer& layer : model == "lenet" ? lenet_layers(batch) : resnet18_layers(batch)) {
    const Tensor x = filled(layer.x, 0.05f), w = filled(layer.w, 0.01f);
    const Tensor b = layer.bias ? filled({layer.w[0]}, 0.01f) : Tensor();
    const Tensor dy = filled(conv2d_output_shape(layer.x, layer.w, layer.params), 0.02f);
    Tensor dw = Tensor::zeros(layer.w, DType::f32);
    Tensor db = layer.bias ? Tensor::zeros({layer.w[0]}, DType::f32) : Tensor();
    const double forward = best_ms(rounds, [&] { conv2d_forward(x, w, b, layer.params); });
    const double backward =
        best_ms(rounds, [&] { conv2d_backward(x, w, dy, dw, db, layer.params, layer.need_dx); });
    total_forward += layer.count * forward;
    total_backward += layer.count * backward;
    std::printf("%-12s x %-18s w %-16s threads %d: forward %7.2f ms, backward %7.2f ms (x%d)\n",
                layer.name, shape_str(layer.x).c_str(), shape_str(layer.w).c_str(), threads,
                forward, backward, layer.count);
  }
  std::printf("%s total: forward %.2f ms, backward %.2f ms\n", model.c_str(), total_forward,
              total_backward);
  return 0;
}
