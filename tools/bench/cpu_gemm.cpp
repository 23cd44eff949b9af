// Times the CPU GEMM Alloy runs (cpu::gemm_serial: its own AVX-512 kernel where the build has
// one, OpenBLAS otherwise) against OpenBLAS's cblas_sgemm in the same process, on one thread, on
// the shapes LeNet's and ResNet-18's convolutions and a small GPT's linear layers hand it: the
// probe behind docs/PERFORMANCE.md's GEMM table. A measurement tool, not a test.
//
//   cpu_gemm [--rounds N]
//
// Prints per shape the best of the rounds' GFLOP/s for each (a round: as many calls as fill 50 ms
// after two warm-up calls) and the largest difference between the two results. OpenBLAS runs the
// kernels it loaded: those the environment's OPENBLAS_CORETYPE names, if set (the line before
// the table says which).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/ops/cpu/blas_core.h"
#include "core/ops/gemm.h"

namespace {

struct Shape {
  const char* name;
  bool transpose_a, transpose_b;
  int m, n, k;
};

// Winograd F(2x2, 3x3) points (filters x tiles x channels, and the backward's two), im2col, and
// LeNet's convolutions (conv1's per-image im2col, conv2's F(2x2, 5x5) points over 16 images).
const Shape kShapes[] = {
    {"resnet 64 28x28 forward", false, false, 64, 784, 64},
    {"resnet 64 28x28 filter grad", false, true, 64, 64, 784},
    {"resnet 64 28x28 data grad", true, false, 64, 784, 64},
    {"resnet 128 14x14 forward", false, false, 128, 256, 128},
    {"resnet 256 7x7 forward", false, false, 256, 256, 256},
    {"resnet 512 4x4 forward", false, false, 512, 256, 512},
    {"resnet 512 4x4 filter grad", false, true, 512, 512, 256},
    {"resnet 512 4x4 data grad", true, false, 512, 256, 512},
    {"resnet im2col 64->128 s2", false, false, 128, 196, 576},
    {"lenet conv1 forward", false, false, 20, 676, 9},
    {"lenet conv1 filter grad", false, true, 20, 9, 676},
    {"lenet conv2 forward", false, false, 50, 400, 20},
    {"lenet conv2 filter grad", false, true, 50, 20, 400},
    {"lenet conv2 data grad", true, false, 20, 400, 50},
    // nanoGPT's CPU shakespeare_char step (768 tokens, 128 wide): each linear layer's forward
    // (x w^T), weight gradient (dy^T x) and input gradient (dy w).
    {"gpt qkv forward", false, true, 768, 384, 128},
    {"gpt qkv weight grad", true, false, 384, 128, 768},
    {"gpt qkv input grad", false, false, 768, 128, 384},
    {"gpt proj forward", false, true, 768, 128, 128},
    {"gpt proj weight grad", true, false, 128, 128, 768},
    {"gpt proj input grad", false, false, 768, 128, 128},
    {"gpt fc forward", false, true, 768, 512, 128},
    {"gpt fc weight grad", true, false, 512, 128, 768},
    {"gpt fc input grad", false, false, 768, 128, 512},
    {"gpt mlp proj forward", false, true, 768, 128, 512},
    {"gpt mlp proj weight grad", true, false, 128, 512, 768},
    {"gpt mlp proj input grad", false, false, 768, 512, 128},
    {"gpt head forward", false, true, 768, 65, 128},
    {"gpt head weight grad", true, false, 65, 128, 768},
    {"gpt head input grad", false, false, 768, 128, 65},
};

template <class Call>
double best_seconds(int rounds, const Call& call) {
  call();
  call();
  double best = 1e30;
  for (int round = 0; round < rounds; ++round) {
    const auto start = std::chrono::steady_clock::now();
    int calls = 0;
    double elapsed = 0.0;
    do {
      call();
      ++calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < 0.05);
    best = std::min(best, elapsed / calls);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: cpu_gemm [--rounds N]\n");
      return 2;
    }
  }
  if (rounds < 1) {
    std::fprintf(stderr, "cpu_gemm: --rounds must be at least 1\n");
    return 2;
  }
  openblas_set_num_threads(1);
  std::printf("alloy: %s; openblas: %s\n", alloy::cpu::gemm_kernels(),
              alloy::cpu::blas_core().c_str());
  std::printf("%-30s %5s %5s %5s %10s %10s %8s %10s\n", "shape", "m", "n", "k", "openblas", "alloy",
              "ratio", "max diff");
  std::mt19937 random(1);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const Shape& s : kShapes) {
    std::vector<float> a(static_cast<std::size_t>(s.m) * s.k),
        b(static_cast<std::size_t>(s.k) * s.n);
    std::vector<float> c_blas(static_cast<std::size_t>(s.m) * s.n), c_alloy(c_blas.size());
    for (float& x : a)
      x = value(random);
    for (float& x : b)
      x = value(random);
    const int lda = s.transpose_a ? s.m : s.k, ldb = s.transpose_b ? s.k : s.n;
    const double blas = best_seconds(rounds, [&] {
      cblas_sgemm(CblasRowMajor, s.transpose_a ? CblasTrans : CblasNoTrans,
                  s.transpose_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a.data(), lda,
                  b.data(), ldb, 0.0f, c_blas.data(), s.n);
    });
    const double alloy = best_seconds(rounds, [&] {
      alloy::cpu::gemm_serial(s.transpose_a, s.transpose_b, s.m, s.n, s.k, 1.0f, a.data(), lda,
                              b.data(), ldb, 0.0f, c_alloy.data(), s.n);
    });
    double max_diff = 0.0;
    for (std::size_t i = 0; i < c_blas.size(); ++i)
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(c_blas[i] - c_alloy[i])));
    const double flops = 2.0 * s.m * s.n * s.k;
    std::printf("%-30s %5d %5d %5d %10.1f %10.1f %7.2fx %10.2e\n", s.name, s.m, s.n, s.k,
                flops / blas * 1e-9, flops / alloy * 1e-9, blas / alloy, max_diff);
  }
  return 0;
}
