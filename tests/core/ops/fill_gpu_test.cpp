// CUDA fills against the CPU's: the same bits in every dtype, as device work (a memset for
// zero, a kernel otherwise) that neither uploads nor makes the host wait.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>

#include "core/ops/fill.h"
#include "core/round_trips.h"
#include "tests/support/gpu.h"

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(fill_gpu)

BOOST_AUTO_TEST_CASE(fills_match_the_cpu_without_round_trips) {
  // The device's context is made at its first use, with its cuBLAS workspace (an allocation):
  // made here, before anything is counted.
  Tensor::empty({1}, DType::f32, Device::cuda(0)).fill(0.0f);
  const float values[] = {0.0f, -0.0f, 1.0f, -2.5f, 3.14159f, 1e30f, NAN, 200.0f};
  for (const DType dtype : {DType::f32, DType::f16, DType::bf16, DType::u8, DType::i32}) {
    for (const float value : values) {
      const bool integer = dtype == DType::u8 || dtype == DType::i32;
      if (integer && (std::isnan(value) || value < 0.0f || value > 255.0f)) continue;
      BOOST_TEST_CONTEXT(dtype_name(dtype) << " fill " << value) {
        Tensor cpu = Tensor::empty({1000, 37}, dtype);
        cpu.fill(value);
        Tensor gpu = Tensor::empty({1000, 37}, dtype, Device::cuda(0));
        const RoundTrips before = round_trips();
        gpu.fill(value);
        BOOST_TEST((round_trips() - before) == RoundTrips{});
        const Tensor back = to_host(gpu);
        BOOST_TEST(std::memcmp(back.raw(), cpu.raw(), cpu.nbytes()) == 0);
      }
    }
  }
  const RoundTrips before = round_trips();
  const Tensor zeros = Tensor::zeros({3, 4}, DType::f16, Device::cuda(0));
  BOOST_TEST((round_trips() - before).uploads == 0u);
  BOOST_TEST((round_trips() - before).host_waits == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
