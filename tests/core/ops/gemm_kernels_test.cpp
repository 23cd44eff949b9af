// The CPU's GEMM kernels (core/ops/cpu/gemm_kernels.h): named for the start event, and run on
// the calling thread only, whichever thread calls them.
#include "core/ops/cpu/gemm_kernels.h"

#include <boost/test/unit_test.hpp>
#include <thread>
#include <vector>

#include "core/ops/gemm.h"

extern "C" int omp_get_max_threads();

BOOST_AUTO_TEST_SUITE(gemm_kernels_suite)

BOOST_AUTO_TEST_CASE(the_kernels_are_named_by_their_instruction_set) {
  const std::string name = alloy::cpu::gemm_kernels();
  BOOST_TEST(name.rfind("oneDNN ", 0) == 0u, name);
  BOOST_TEST(name.size() > std::string("oneDNN ").size(), name);
}

// OpenMP's default is a thread per core: a GEMM that took them would compete with alloy's pool.
// Each new thread starts with that default, so the check runs on fresh threads.
BOOST_AUTO_TEST_CASE(a_thread_that_runs_a_gemm_asks_for_no_other_threads) {
  for (int trial = 0; trial < 2; ++trial) {
    int threads_after = 0;
    std::thread caller([&] {
      const std::vector<float> a(64 * 64, 1.0f), b(64 * 64, 2.0f);
      std::vector<float> c(64 * 64);
      alloy::cpu::gemm_serial(false, false, 64, 64, 64, 1.0f, a.data(), 64, b.data(), 64, 0.0f,
                              c.data(), 64);
      BOOST_TEST(c[0] == 128.0f);
      threads_after = omp_get_max_threads();
    });
    caller.join();
    BOOST_TEST(threads_after == 1);
  }
}

BOOST_AUTO_TEST_SUITE_END()
