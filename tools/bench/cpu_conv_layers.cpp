// Times the CPU convolution of each of a model's layers alone, forward and backward, at one
// batch size and thread count: the probe behind docs/PERFORMANCE.md's per-layer CPU figures
// (which kernel runs is conv2d's own choice: im2col, Winograd 3x3 or Winograd 5x5). A
// measurement tool, not a test.
//
//   cpu_conv_layers [--batch N] [--threads N] [--rounds N]
//
// Prints, per layer, the best of the rounds' mean times of 10 calls after 3 warm-up calls, in ms.
// `alloy` picks OpenBLAS's kernels for the CPU itself (OPENBLAS_CORETYPE, named in its JSON
// start event as blas_core); set the same variable here to time the same kernels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
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
  bool need_dx;  // the first layer's input gradient is never asked for
};

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
  if (argc % 2 == 0) {
    std::fprintf(stderr, "cpu_conv_layers: %s needs a value\n", argv[argc - 1]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
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
  const Layer layers[] = {{"lenet conv1", {batch, 1, 28, 28}, {20, 1, 3, 3}, false},
                          {"lenet conv2", {batch, 20, 13, 13}, {50, 20, 5, 5}, true}};
  for (const Layer& layer : layers) {
    const Tensor x = filled(layer.x, 0.05f), w = filled(layer.w, 0.01f);
    const Tensor b = filled({layer.w[0]}, 0.01f);
    const Tensor dy = filled(conv2d_output_shape(layer.x, layer.w, {}), 0.02f);
    Tensor dw = Tensor::zeros(layer.w, DType::f32), db = Tensor::zeros({layer.w[0]}, DType::f32);
    const double forward = best_ms(rounds, [&] { conv2d_forward(x, w, b, {}); });
    const double backward =
        best_ms(rounds, [&] { conv2d_backward(x, w, dy, dw, db, {}, layer.need_dx); });
    std::printf("%-12s x %-18s w %-16s threads %d: forward %7.2f ms, backward %7.2f ms\n",
                layer.name, shape_str(layer.x).c_str(), shape_str(layer.w).c_str(), threads,
                forward, backward);
  }
  return 0;
}
