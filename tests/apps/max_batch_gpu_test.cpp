// `alloy mem` on a CUDA device: running out of device memory is an OutOfMemory that leaves the
// device usable, the driver's view of memory, each level's device view, and `--max-batch`'s
// search against a device whose free memory a ballast tensor cuts to a known size.
#include <boost/test/unit_test.hpp>

#include "apps/train/max_batch.h"
#include "apps/train/memory_report.h"
#include "core/error.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/allocator.h"
#endif

using namespace alloy;
using namespace alloy::app;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(max_batch_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

MeasureConfig lenet_config(std::int64_t batch) {
  MeasureConfig config;
  config.model = "lenet";
  config.batch_size = batch;
  config.steps = 2;
  config.device = Device::cuda(0);
  return config;
}

}  // namespace

// First in the process, before anything has built the device's context: its cuBLAS workspace
// is not the level's (it was: "O0 left 33554460 bytes allocated", on an H200 and the emulator).
BOOST_AUTO_TEST_CASE(the_first_level_measured_leaves_nothing_allocated) {
  const LevelReport r = measure_level(lenet_config(8), level_properties(amp::OptLevel::O0, {}));
  BOOST_TEST(r.leaked_bytes == 0);
  BOOST_TEST(r.bytes(MemoryCategory::workspace) < std::int64_t{32} << 20);
}

BOOST_AUTO_TEST_CASE(running_out_of_memory_is_its_own_error_and_leaves_the_device_usable) {
  const cuda::DeviceMemoryInfo info = cuda::device_memory_info(0);
  BOOST_TEST(info.total_bytes > 0);
  BOOST_TEST(info.free_bytes <= info.total_bytes);
  BOOST_TEST(info.used_bytes() > 0);  // the context at least
  try {
    Tensor absurd = Tensor::empty({info.total_bytes}, DType::f32, Device::cuda(0));
    BOOST_FAIL("allocating 4x the device's memory succeeded");
  } catch (const OutOfMemory& error) {
    BOOST_TEST(std::string(error.what()).find("cudaMalloc") != std::string::npos, error.what());
  }
  Generator generator(7);
  const Tensor host = random_tensor({1000}, DType::f32, generator);
  check_gpu_equal(to_cuda(host), host, "a copy after running out of memory");
}

BOOST_AUTO_TEST_CASE(the_driver_sees_an_allocation) {
  cuda::empty_cache(0);
  const std::int64_t before = cuda::device_memory_info(0).used_bytes();
  {
    Tensor gib = Tensor::empty({kGiB / 4}, DType::f32, Device::cuda(0));
    BOOST_TEST(cuda::device_memory_info(0).used_bytes() >= before + kGiB);
  }
  cuda::empty_cache(0);
  BOOST_TEST(cuda::device_memory_info(0).used_bytes() < before + kGiB);
}

BOOST_AUTO_TEST_CASE(a_level_reports_its_device_view) {
  const LevelReport r = measure_level(lenet_config(256), level_properties(amp::OptLevel::O2, {}));
  BOOST_REQUIRE(r.device_view.has_value());
  BOOST_TEST(r.device_view->reserved_bytes >= r.peak_bytes);
  BOOST_TEST(r.device_view->driver_used_bytes >= r.device_view->reserved_bytes);
  BOOST_TEST(r.device_view->driver_total_bytes == cuda::device_memory_info(0).total_bytes);
}

BOOST_AUTO_TEST_CASE(max_batch_reaches_the_limit_when_memory_is_plenty) {
  const MaxBatch m =
      find_max_batch(lenet_config(64), level_properties(amp::OptLevel::O0, {}), 512, 1.0 / 32);
  BOOST_TEST(m.largest_fitting == 512);
  BOOST_TEST(m.reached_limit());
  BOOST_TEST(m.probes == 4);  // 64, 128, 256, 512
}

BOOST_AUTO_TEST_CASE(max_batch_finds_the_edge_of_a_cut_down_device) {
  const amp::AmpProperties o0 = level_properties(amp::OptLevel::O0, {});
  // What one LeNet image costs, from two measured batches (the fixed part cancels): its
  // activations and data. Not the cache's reserved bytes, which a roomy device lets grow to
  // several times the tensors (blocks kept per size class) and which the cache gives back when
  // memory runs short; nor cuDNN's workspace, which grows with the batch on a roomy device (FFT
  // algorithms) and shrinks to what fits. On an H200: 842588 bytes an image reserved, 406000
  // with the workspace, 166000 in activations and data, and the edge at 6400 images in 1 GiB.
  const auto per_batch = [&](std::int64_t batch) {
    const LevelReport r = measure_level(lenet_config(batch), o0);
    return r.bytes(MemoryCategory::activations) + r.bytes(MemoryCategory::data);
  };
  const double per_image = static_cast<double>(per_batch(2048) - per_batch(1024)) / 1024;
  BOOST_REQUIRE(per_image > 0);

  cuda::empty_cache(0);
  constexpr std::int64_t kLeft = kGiB;  // free memory left beside the ballast
  const std::int64_t ballast_bytes = cuda::device_memory_info(0).free_bytes - kLeft;
  BOOST_REQUIRE(ballast_bytes > 0);
  const Tensor ballast = Tensor::empty({ballast_bytes}, DType::u8, Device::cuda(0));

  const MaxBatch m = find_max_batch(lenet_config(256), o0, std::int64_t{1} << 22, 1.0 / 32);
  BOOST_TEST_MESSAGE("max batch " << m.largest_fitting << " (fails at " << m.smallest_failing
                                  << ") in " << m.probes << " probes; " << per_image
                                  << " bytes per image");
  BOOST_TEST(!m.reached_limit());
  BOOST_TEST(m.largest_fitting > 0);
  BOOST_TEST(m.smallest_failing > m.largest_fitting);
  BOOST_TEST(m.smallest_failing - m.largest_fitting <=
             std::max<std::int64_t>(1, m.largest_fitting / 32));
  // The edge lies where the per-image cost fills what was left: within a factor of 2 of it
  // (the fixed costs, the workspace, block rounding and the cache's retries are not modelled).
  const double expected = static_cast<double>(kLeft) / per_image;
  BOOST_TEST(static_cast<double>(m.largest_fitting) > expected / 2);
  BOOST_TEST(static_cast<double>(m.largest_fitting) < expected * 2);
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
