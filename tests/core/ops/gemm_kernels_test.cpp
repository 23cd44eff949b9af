// The CPU's GEMM kernels (core/ops/cpu/gemm_kernels.h): which library runs them on which CPU,
// that both compute the same products, their names for the start event, and that they run on
// the calling thread only.
#include "core/ops/cpu/gemm_kernels.h"

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "core/ops/gemm.h"

extern "C" int omp_get_max_threads();

using alloy::cpu::choose_gemm_library;
using alloy::cpu::CpuVectorFeatures;
using alloy::cpu::GemmLibrary;

namespace {

const CpuVectorFeatures kSse{false, false}, kAvx2{true, false}, kAvx512{true, true};
const GemmLibrary kLibraries[] = {GemmLibrary::openblas, GemmLibrary::onednn};

const char* name(GemmLibrary library) {
  return library == GemmLibrary::openblas ? "openblas" : "onednn";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gemm_kernels_suite)

BOOST_AUTO_TEST_CASE(openblas_runs_when_its_kernels_are_the_widest_the_cpu_allows) {
  for (const char* core : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    BOOST_TEST(name(choose_gemm_library(core, kAvx512)) == "openblas", core);
  for (const char* core : {"Haswell", "Zen", "Prescott", "Sandybridge", "unknown"})
    BOOST_TEST(name(choose_gemm_library(core, kAvx512)) == "onednn", core);
  for (const char* core : {"Haswell", "Zen", "SkylakeX"})
    BOOST_TEST(name(choose_gemm_library(core, kAvx2)) == "openblas", core);
  for (const char* core : {"Prescott", "Core2", "Nehalem", "Atom", "Sandybridge"})
    BOOST_TEST(name(choose_gemm_library(core, kAvx2)) == "onednn", core);
  for (const char* core : {"Prescott", "Nehalem"})
    BOOST_TEST(name(choose_gemm_library(core, kSse)) == "openblas", core);
}

// Every transpose, ragged sizes and leading dimensions wider than the rows, beta 0 (over NaN)
// and 1: each library against a float64 sum.
BOOST_AUTO_TEST_CASE(both_libraries_compute_the_products) {
  const int m = 19, n = 37, k = 53, ld = 64;
  std::vector<float> a(ld * ld), b(ld * ld);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    b[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
  }
  for (const GemmLibrary library : kLibraries) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        for (const float beta : {0.0f, 1.0f}) {
          std::vector<float> c(m * ld, beta == 0.0f ? NAN : 0.5f);
          alloy::cpu::library_sgemm(library, ta, tb, m, n, k, 2.0f, a.data(), ld, b.data(), ld,
                                    beta, c.data(), ld);
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
              double sum = 0.0, magnitude = 0.0;
              for (int p = 0; p < k; ++p) {
                const double x = ta ? a[p * ld + i] : a[i * ld + p];
                const double y = tb ? b[j * ld + p] : b[p * ld + j];
                sum += x * y;
                magnitude += std::fabs(x * y);
              }
              const double expected = 2.0 * sum + (beta == 0.0f ? 0.0 : 0.5);
              BOOST_TEST(std::fabs(c[i * ld + j] - expected) <= 1e-6 * (2.0 * magnitude + 1.0),
                         name(library)
                             << " ta " << ta << " tb " << tb << " beta " << beta << " at " << i
                             << "," << j << ": " << c[i * ld + j] << " vs " << expected);
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(the_kernels_are_named_by_library_and_instruction_set) {
  const std::string kernels = alloy::cpu::gemm_kernels();
  const std::string prefix =
      alloy::cpu::gemm_library() == GemmLibrary::openblas ? "OpenBLAS " : "oneDNN ";
  BOOST_TEST(kernels.rfind(prefix, 0) == 0u, kernels);
  BOOST_TEST(kernels.size() > prefix.size(), kernels);
}

// OpenMP's default is a thread per core: a GEMM that took them would compete with alloy's pool.
// Each new thread starts with that default, so the check runs on fresh threads.
BOOST_AUTO_TEST_CASE(a_thread_that_runs_a_onednn_gemm_asks_for_no_other_threads) {
  for (int trial = 0; trial < 2; ++trial) {
    int threads_after = 0;
    std::thread caller([&] {
      const std::vector<float> a(64 * 64, 1.0f), b(64 * 64, 2.0f);
      std::vector<float> c(64 * 64);
      alloy::cpu::library_sgemm(GemmLibrary::onednn, false, false, 64, 64, 64, 1.0f, a.data(), 64,
                                b.data(), 64, 0.0f, c.data(), 64);
      BOOST_TEST(c[0] == 128.0f);
      threads_after = omp_get_max_threads();
    });
    caller.join();
    BOOST_TEST(threads_after == 1);
  }
}

BOOST_AUTO_TEST_SUITE_END()
