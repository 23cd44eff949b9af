// CUDA graphs (core/cuda/graph.h) and the caching allocator's private pools
// (core/cuda/allocator.h): a pool serves the allocations made while it routes and keeps its
// blocks from eager work afterwards, adopts blocks freed during a capture, gives everything
// back to the cache when destroyed; a captured computation does not run until replayed, then
// replays on new inputs at the same addresses without cudaMalloc; a call that cannot be
// captured fails the capture with an error naming it and leaves the stream usable.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/ops/relu.h"
#include "tests/support/gpu.h"

#ifdef ALLOY_HAVE_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/context.h"
#include "core/cuda/graph.h"
#endif

using namespace alloy;
using namespace alloy::test;

BOOST_AUTO_TEST_SUITE(cuda_graph_gpu)

#ifdef ALLOY_HAVE_CUDA

namespace {

const Device kDevice = Device::cuda(0);

// Each test uses its own sizes (distinct 512-byte classes), so the blocks it reasons about are
// the last ones freed in their class (free lists hand out the most recent first).
Tensor floats(std::int64_t count) {
  return Tensor::empty({count}, DType::f32, kDevice);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_pool_serves_its_routing_and_keeps_its_blocks_from_eager_work) {
  void* cached = nullptr;
  {
    Tensor t = floats(3000);  // 12000 bytes: a 12288-byte block, then cached
    cached = t.raw();
  }
  cuda::GraphPool pool(0);
  void* inside = nullptr;
  {
    const cuda::PoolRouting routing(pool);
    Tensor a = floats(3000);
    inside = a.raw();
    const cuda::PoolStatistics during = pool.statistics();
    BOOST_CHECK_EQUAL(during.blocks, 1);
    BOOST_CHECK_EQUAL(during.reserved_bytes, 12288);
    BOOST_CHECK_EQUAL(during.in_use_bytes, 12000);
    BOOST_CHECK_EQUAL(during.in_use[static_cast<int>(MemoryCategory::activations)], 12000);
  }
  BOOST_CHECK_EQUAL(inside, cached);  // the cached block was adopted, not a new cudaMalloc
  const cuda::PoolStatistics after = pool.statistics();
  BOOST_CHECK_EQUAL(after.blocks, 1);
  BOOST_CHECK_EQUAL(after.in_use_bytes, 0);
  BOOST_CHECK_EQUAL(after.peak_in_use_bytes, 12000);
  BOOST_CHECK_EQUAL(after.in_use_at_peak[static_cast<int>(MemoryCategory::activations)], 12000);
  {
    Tensor eager = floats(3000);
    BOOST_CHECK_NE(eager.raw(), inside);  // the graph may still write there
  }
  {
    const cuda::PoolRouting routing(pool);
    Tensor again = floats(3000);
    BOOST_CHECK_EQUAL(again.raw(), inside);  // the pool's own block, for its next capture
  }
}

BOOST_AUTO_TEST_CASE(a_block_freed_during_routing_joins_the_pool) {
  Tensor before = floats(5000);  // allocated before the capture, read by it, freed during it
  void* address = before.raw();
  cuda::GraphPool pool(0);
  {
    const cuda::PoolRouting routing(pool);
    before = Tensor();
  }
  BOOST_CHECK_EQUAL(pool.statistics().blocks, 1);
  std::vector<Tensor> eager;
  for (int i = 0; i < 4; ++i) {
    eager.push_back(floats(5000));
    BOOST_CHECK_NE(eager.back().raw(), address);
  }
}

BOOST_AUTO_TEST_CASE(a_destroyed_pool_gives_its_blocks_back_to_the_cache) {
  void* freed_in_pool = nullptr;
  void* still_held = nullptr;
  Tensor held;
  cuda::CacheStatistics with_pool;
  {
    cuda::GraphPool pool(0);
    {
      const cuda::PoolRouting routing(pool);
      Tensor scratch = floats(7000);  // 28000 bytes: a 28160-byte block, free in the pool
      freed_in_pool = scratch.raw();
      held = floats(9000);
      still_held = held.raw();
    }
    with_pool = cuda::cache_statistics(0);
  }
  const cuda::CacheStatistics destroyed = cuda::cache_statistics(0);
  BOOST_CHECK_EQUAL(destroyed.reserved_bytes, with_pool.reserved_bytes);  // cached, not freed
  BOOST_CHECK_EQUAL(destroyed.cached_bytes - with_pool.cached_bytes, 28160);
  {
    Tensor reuse = floats(7000);
    BOOST_CHECK_EQUAL(reuse.raw(), freed_in_pool);
  }
  held = Tensor();  // in use when its pool went: it goes to the cache now
  const std::int64_t mallocs = cuda::cache_statistics(0).malloc_calls;
  Tensor reuse = floats(9000);
  BOOST_CHECK_EQUAL(reuse.raw(), still_held);
  BOOST_CHECK_EQUAL(cuda::cache_statistics(0).malloc_calls, mallocs);
}

BOOST_AUTO_TEST_CASE(one_pool_routes_a_device_at_a_time) {
  cuda::GraphPool first(0);
  cuda::GraphPool second(0);
  const cuda::PoolRouting routing(first);
  BOOST_CHECK_EXCEPTION(cuda::PoolRouting{second}, Error, [](const Error& error) {
    const std::string message = error.what();
    BOOST_TEST_MESSAGE(message);
    return message.find("one capture at a time") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(a_captured_computation_runs_only_when_replayed_and_allocates_nothing) {
  Generator generator(41);
  const Tensor first = random_tensor({4, 300}, DType::f32, generator, -1.0f, 1.0f);
  Tensor x = to_cuda(first);
  Tensor y = Tensor::empty(x.shape(), DType::f32, kDevice);
  const auto work = [&] { y.copy_from(relu_forward(x)); };
  work();  // eager warm-up
  check_gpu_equal(y, relu_forward(first), "eager");

  const std::unique_ptr<CapturedWork> graph = capture_cuda_work(kDevice, work);
  BOOST_CHECK_GE(graph->nodes(), 2u);  // the kernel and the copy
  const Tensor second = random_tensor({4, 300}, DType::f32, generator, -1.0f, 1.0f);
  x.copy_from(second);
  check_gpu_equal(y, relu_forward(first), "after the capture, before any replay");

  const std::int64_t mallocs = cuda::cache_statistics(0).malloc_calls;
  graph->replay();
  check_gpu_equal(y, relu_forward(second), "first replay");
  for (int i = 0; i < 5; ++i) {
    const Tensor input = random_tensor({4, 300}, DType::f32, generator, -1.0f, 1.0f);
    x.copy_from(input);  // outside the graph, into the address it reads
    graph->replay();
    check_gpu_equal(y, relu_forward(input), "replay");
  }
  BOOST_CHECK_EQUAL(cuda::cache_statistics(0).malloc_calls, mallocs);
}

BOOST_AUTO_TEST_CASE(an_uncapturable_call_fails_the_capture_and_leaves_the_stream_usable) {
  Tensor x = Tensor::empty({16}, DType::f32, kDevice);
  const Tensor host = Tensor::from_floats({16}, std::vector<float>(16, 2.0f));
  try {
    // A copy from pageable host memory followed by a stream synchronise: neither fits a graph.
    capture_cuda_work(kDevice, [&] { x.copy_from(host); });
    BOOST_FAIL("a host-to-device copy and a stream synchronise were captured");
  } catch (const Error& error) {
    const std::string message = error.what();
    BOOST_TEST_MESSAGE(message);
    // The copy or the synchronise after it, whichever CUDA refuses first.
    BOOST_CHECK(message.find("cudaErrorStreamCapture") != std::string::npos);
    BOOST_CHECK(message.find("cuda:0") != std::string::npos);
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  BOOST_REQUIRE_EQUAL(cudaStreamIsCapturing(cuda::stream_of(kDevice), &status), cudaSuccess);
  BOOST_CHECK(status == cudaStreamCaptureStatusNone);
  BOOST_CHECK_EQUAL(cudaGetLastError(), cudaSuccess);
  x.copy_from(host);  // eager work goes on
  check_gpu_equal(x, host, "eager copy after a failed capture");
  // The failed capture's pool routes no more: a new capture gets a pool of its own.
  Tensor y = Tensor::empty({16}, DType::f32, kDevice);
  const std::unique_ptr<CapturedWork> graph =
      capture_cuda_work(kDevice, [&] { y.copy_from(relu_forward(x)); });
  graph->replay();
  check_gpu_equal(y, host, "a capture after a failed one");
}

#else

BOOST_AUTO_TEST_CASE(needs_the_cuda_backend) {}  // never reached: the fixture skips first

#endif

BOOST_AUTO_TEST_SUITE_END()
