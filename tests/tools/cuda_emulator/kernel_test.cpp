// The CUDA emulator's kernel engine and device builtins: grids run through run_grid directly,
// with thread bodies that use the builtins as a kernel does, checked against host models of
// what a GPU computes (CUDA's shuffle and reduction orders included).
#define BOOST_TEST_MODULE cuda_emulator_kernel
#include <boost/test/unit_test.hpp>

// clang-format off: the prelude comes first, as in every emulated .cu file
#include "tools/cuda_emulator/prelude.h"
// clang-format on

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/ops/cuda/common.cuh"
#include "tools/cuda_emulator/emulator.h"
#include "tools/cuda_emulator/kernel.h"

using alloy::emulator::DeviceFault;
using alloy::emulator::run_grid;

namespace {

unsigned int linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

unsigned int linear_block() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

std::vector<float> random_floats(std::size_t count, unsigned int seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& value : values)
    value = distribution(generator);
  return values;
}

// Lane 0's value after `for (offset = 16; offset > 0; offset /= 2) v += shfl_down(v, offset)`:
// a lane whose source lies past the warp adds its own value, as CUDA's shuffle returns it.
template <class T>
T warp_sum_model(std::array<T, 32> lanes) {
  for (int offset = 16; offset > 0; offset /= 2) {
    std::array<T, 32> next{};
    for (int lane = 0; lane < 32; ++lane) {
      next[lane] = lanes[lane] + lanes[lane + offset < 32 ? lane + offset : lane];
    }
    lanes = next;
  }
  return lanes[0];
}

// alloy::cuda::block_sum's order: each warp's tree, then warp 0's tree over the warp sums.
template <class T>
T block_sum_model(const std::vector<T>& values) {
  std::array<T, 32> sums{};
  for (std::size_t warp = 0; warp < values.size() / 32; ++warp) {
    std::array<T, 32> lanes{};
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(warp * 32), 32, lanes.begin());
    sums[warp] = warp_sum_model(lanes);
  }
  return warp_sum_model(sums);
}

// The DeviceFault's message of running the grid; fails the test if it runs cleanly.
std::string fault_of(const char* kernel, dim3 grid, dim3 block, const std::function<void()>& body) {
  try {
    run_grid(kernel, grid, block, body);
  } catch (const DeviceFault& fault) {
    BOOST_CHECK_EQUAL(fault.status(), cudaErrorLaunchFailure);
    return fault.what();
  }
  BOOST_ERROR("kernel " << kernel << " ran without a fault");
  return "";
}

// A grid with a barrier and a shuffle: its output, 256 - i % 256 at i, or an exception.
std::vector<int> barrier_and_shuffle_grid() {
  std::vector<int> out(512, 0);
  run_grid("after_fault", dim3(2), dim3(256), [&] {
    __shared__ int slots[256];
    slots[threadIdx.x] = static_cast<int>(threadIdx.x);
    __syncthreads();
    out[blockIdx.x * 256 + threadIdx.x] = slots[255 - threadIdx.x] + __shfl_down_sync(~0u, 1, 1);
  });
  return out;
}

void check_grid_output(const std::vector<int>& out) {
  BOOST_REQUIRE_EQUAL(out.size(), 512u);
  for (int i = 0; i < 512; ++i)
    BOOST_REQUIRE_EQUAL(out[i], 256 - i % 256);
}

// That the engine is in order, after a fault.
void check_engine_works() {
  check_grid_output(barrier_and_shuffle_grid());
}

BOOST_AUTO_TEST_CASE(indices_cover_the_grid_exactly_once) {
  for (const auto& [grid, block] :
       {std::pair{dim3(5), dim3(96)}, std::pair{dim3(3, 4), dim3(8, 6)},
        std::pair{dim3(2, 3, 4), dim3(4, 2, 8)}, std::pair{dim3(1, 1, 3), dim3(1, 1, 64)}}) {
    const unsigned int threads = block.x * block.y * block.z;
    const unsigned int blocks = grid.x * grid.y * grid.z;
    std::vector<int> visits(threads * blocks, 0);
    bool in_range = true;
    run_grid("indices", grid, block, [&] {
      in_range = in_range && threadIdx.x < blockDim.x && threadIdx.y < blockDim.y &&
                 threadIdx.z < blockDim.z && blockIdx.x < gridDim.x && blockIdx.y < gridDim.y &&
                 blockIdx.z < gridDim.z && blockDim.x == block.x && blockDim.y == block.y &&
                 blockDim.z == block.z && gridDim.x == grid.x && gridDim.y == grid.y &&
                 gridDim.z == grid.z;
      ++visits[linear_block() * threads + linear_thread()];
    });
    BOOST_CHECK(in_range);
    BOOST_CHECK(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; }));
  }
}

BOOST_AUTO_TEST_CASE(blocks_run_in_z_y_x_order) {
  std::vector<unsigned int> order;
  run_grid("order", dim3(3, 2, 2), dim3(1), [&] { order.push_back(linear_block()); });
  std::vector<unsigned int> expected(12);
  std::iota(expected.begin(), expected.end(), 0u);
  BOOST_CHECK_EQUAL_COLLECTIONS(order.begin(), order.end(), expected.begin(), expected.end());
}

BOOST_AUTO_TEST_CASE(shared_memory_tree_reduction) {
  constexpr unsigned int kThreads = 256;
  constexpr unsigned int kBlocks = 7;
  const std::vector<float> in = random_floats(kThreads * kBlocks, 1);
  std::vector<float> out(kBlocks);
  run_grid("tree_sum", dim3(kBlocks), dim3(kThreads), [&] {
    __shared__ float partial[kThreads];
    partial[threadIdx.x] = in[blockIdx.x * kThreads + threadIdx.x];
    __syncthreads();
    for (unsigned int half = kThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
  });
  for (unsigned int b = 0; b < kBlocks; ++b) {
    std::vector<float> model(in.begin() + b * kThreads, in.begin() + (b + 1) * kThreads);
    for (unsigned int half = kThreads / 2; half > 0; half /= 2) {
      for (unsigned int i = 0; i < half; ++i)
        model[i] += model[i + half];
    }
    BOOST_CHECK_EQUAL(out[b], model[0]);
  }
}

template <class T>
void check_warp_sum() {
  const std::vector<float> random = random_floats(128, 2);
  const std::vector<T> in(random.begin(), random.end());
  std::vector<T> out(4);
  run_grid("warp_sum", dim3(1), dim3(128), [&] {
    T value = in[threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2)
      value += __shfl_down_sync(~0u, value, offset);
    if (threadIdx.x % 32 == 0) out[threadIdx.x / 32] = value;
  });
  for (int warp = 0; warp < 4; ++warp) {
    std::array<T, 32> lanes{};
    std::copy_n(in.begin() + warp * 32, 32, lanes.begin());
    BOOST_CHECK_EQUAL(out[warp], warp_sum_model(lanes));
  }
}

BOOST_AUTO_TEST_CASE(warp_sum_with_shfl_down_float) {
  check_warp_sum<float>();
}

BOOST_AUTO_TEST_CASE(warp_sum_with_shfl_down_double) {
  check_warp_sum<double>();
}

BOOST_AUTO_TEST_CASE(shuffle_widths_xor_and_ballot) {
  std::vector<int> down(64), butterfly(64);
  std::vector<unsigned int> ballots(64);
  run_grid("shuffles", dim3(1), dim3(64), [&] {
    const int lane = static_cast<int>(threadIdx.x % 32);
    // Segments of 8 lanes: a source past the segment's end keeps the lane's own value.
    down[threadIdx.x] = __shfl_down_sync(~0u, lane * 10, 3, 8);
    int sum = lane;
    for (int mask = 16; mask > 0; mask /= 2)
      sum += __shfl_xor_sync(~0u, sum, mask);
    butterfly[threadIdx.x] = sum;
    ballots[threadIdx.x] = __ballot_sync(~0u, lane % 3 == 0 || threadIdx.x == 40);
  });
  unsigned int every_third = 0;
  for (int lane = 0; lane < 32; lane += 3)
    every_third |= 1u << lane;
  for (int i = 0; i < 64; ++i) {
    const int lane = i % 32;
    BOOST_CHECK_EQUAL(down[i], (lane % 8 + 3 < 8 ? lane + 3 : lane) * 10);
    BOOST_CHECK_EQUAL(butterfly[i], 31 * 32 / 2);
    BOOST_CHECK_EQUAL(ballots[i], i < 32 ? every_third : every_third | 1u << 8);
  }
}

// Each half-warp syncs on its own mask, then reads another lane's slot of the same half.
BOOST_AUTO_TEST_CASE(syncwarp_orders_shared_memory_within_its_mask) {
  std::vector<int> out(64);
  run_grid("syncwarp", dim3(1), dim3(64), [&] {
    __shared__ int slots[64];
    slots[threadIdx.x] = static_cast<int>(threadIdx.x) * 3;
    const unsigned int lane = threadIdx.x % 32;
    __syncwarp(lane < 16 ? 0x0000ffffu : 0xffff0000u);
    out[threadIdx.x] = slots[threadIdx.x ^ 15];
  });
  for (int i = 0; i < 64; ++i)
    BOOST_CHECK_EQUAL(out[i], (i ^ 15) * 3);
}

BOOST_AUTO_TEST_CASE(warps_of_a_2d_block_follow_the_linear_thread_index) {
  std::vector<unsigned int> out(64);
  run_grid("warps_2d", dim3(1), dim3(8, 8),
           [&] { out[linear_thread()] = __shfl_down_sync(~0u, linear_thread(), 1); });
  for (unsigned int id = 0; id < 64; ++id)
    BOOST_CHECK_EQUAL(out[id], id % 32 == 31 ? id : id + 1);
}

BOOST_AUTO_TEST_CASE(block_sum_and_block_max_for_every_block_size) {
  for (unsigned int threads = 32; threads <= 1024; threads += 32) {
    std::vector<float> in = random_floats(threads, threads);
    in[threads / 2] = std::numeric_limits<float>::quiet_NaN();  // loses to every number
    std::vector<double> in_double(in.begin(), in.end());
    in_double[threads / 2] = 0.25;
    float sum = 0.0f;
    double sum_double = 0.0;
    std::vector<float> maxima(threads);
    run_grid("block_reductions", dim3(1), dim3(threads), [&] {
      const float value = in[threadIdx.x];
      const float block = alloy::cuda::block_sum(std::isnan(value) ? 0.0f : value);
      const double block_double = alloy::cuda::block_sum(in_double[threadIdx.x]);
      maxima[threadIdx.x] = alloy::cuda::block_max(value);
      if (threadIdx.x == 0) {
        sum = block;
        sum_double = block_double;
      }
    });
    std::vector<float> summed = in;
    summed[threads / 2] = 0.0f;
    BOOST_CHECK_EQUAL(sum, block_sum_model(summed));
    BOOST_CHECK_EQUAL(sum_double, block_sum_model(in_double));
    summed[threads / 2] = -INFINITY;
    const float expected_max = *std::max_element(summed.begin(), summed.end());
    BOOST_CHECK(
        std::all_of(maxima.begin(), maxima.end(), [&](float m) { return m == expected_max; }));
  }
}

BOOST_AUTO_TEST_CASE(arrive_last_sees_every_partial) {
  constexpr unsigned int kBlocks = 37;
  constexpr unsigned int kThreads = 128;
  const std::vector<float> in = random_floats(kBlocks * kThreads, 3);
  std::vector<float> partials(kBlocks, 0.0f);
  unsigned int counter = 0;
  unsigned int last_blocks = 0;
  float total = 0.0f;
  bool seen_by_all = true;
  run_grid("grid_sum", dim3(kBlocks), dim3(kThreads), [&] {
    const float block = alloy::cuda::block_sum(in[blockIdx.x * kThreads + threadIdx.x]);
    if (threadIdx.x == 0) partials[blockIdx.x] = block;
    const bool last = alloy::cuda::arrive_last(&counter);
    if (!last) return;
    if (threadIdx.x == 0) {
      ++last_blocks;
      float sum = 0.0f;
      for (unsigned int b = 0; b < gridDim.x; ++b) {
        const float partial = __ldcg(&partials[b]);
        seen_by_all = seen_by_all && partial != 0.0f;
        sum += partial;
      }
      total = sum;
    }
  });
  float expected = 0.0f;
  for (unsigned int b = 0; b < kBlocks; ++b) {
    expected += block_sum_model(
        std::vector<float>(in.begin() + b * kThreads, in.begin() + (b + 1) * kThreads));
  }
  BOOST_CHECK_EQUAL(last_blocks, 1u);
  BOOST_CHECK(seen_by_all);
  BOOST_CHECK_EQUAL(total, expected);
  BOOST_CHECK_EQUAL(counter, 0u);  // back at zero for the next launch
}

BOOST_AUTO_TEST_CASE(syncthreads_or) {
  std::vector<int> out(4 * 64, -1);
  run_grid("any", dim3(4), dim3(64), [&] {
    // In blocks 0-2 one thread has a true predicate, in block 3 none.
    const bool mine = blockIdx.x < 3 && threadIdx.x == 10 * blockIdx.x + 5;
    const int first = __syncthreads_or(mine);
    const int second = __syncthreads_or(0);
    out[blockIdx.x * 64 + threadIdx.x] = first * 2 + second;
  });
  for (int i = 0; i < 4 * 64; ++i)
    BOOST_CHECK_EQUAL(out[i], i < 3 * 64 ? 2 : 0);
}

BOOST_AUTO_TEST_CASE(atomics) {
  int add_int = 0;
  unsigned int add_unsigned = 0;
  unsigned long long add_wide = 0;
  float add_float = 0.0f;
  double add_double = 0.0;
  int max_int = std::numeric_limits<int>::min();
  unsigned int exchanged = 0;
  int cas = 0;
  unsigned int ring = 0;
  std::vector<unsigned int> tickets;
  int wrapped = std::numeric_limits<int>::max();
  run_grid("atomics", dim3(3), dim3(100), [&] {
    const unsigned int id = blockIdx.x * 100 + threadIdx.x;
    atomicAdd(&add_int, static_cast<int>(id) - 150);
    atomicAdd(&add_unsigned, id);
    atomicAdd(&add_wide, 1ull << 40);
    atomicAdd(&add_float, 0.5f);
    atomicAdd(&add_double, 0.25);
    atomicMax(&max_int, static_cast<int>(id % 17) - 20);
    atomicExch(&exchanged, id);
    atomicCAS(&cas, static_cast<int>(id), static_cast<int>(id) + 1);  // counts up once per id
    if (id < 10) tickets.push_back(atomicInc(&ring, 3));
    if (id == 0) atomicAdd(&wrapped, 1);
  });
  BOOST_CHECK_EQUAL(add_int, 300 * 299 / 2 - 150 * 300);
  BOOST_CHECK_EQUAL(add_unsigned, 300u * 299 / 2);
  BOOST_CHECK_EQUAL(add_wide, 300ull << 40);
  BOOST_CHECK_EQUAL(add_float, 150.0f);
  BOOST_CHECK_EQUAL(add_double, 75.0);
  BOOST_CHECK_EQUAL(max_int, 16 - 20);
  BOOST_CHECK_EQUAL(exchanged, 299u);
  BOOST_CHECK_EQUAL(cas, 300);
  const std::vector<unsigned int> expected_tickets{0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
  BOOST_CHECK_EQUAL_COLLECTIONS(tickets.begin(), tickets.end(), expected_tickets.begin(),
                                expected_tickets.end());
  BOOST_CHECK_EQUAL(ring, 2u);
  BOOST_CHECK_EQUAL(wrapped, std::numeric_limits<int>::min());
}

BOOST_AUTO_TEST_CASE(round_to_nearest_intrinsics_are_not_contracted) {
  // a * b = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 (a tie, to even): the sum with -(1 + 2^-11)
  // is 0 when the product is rounded, 2^-24 when a multiply-add keeps it exact.
  volatile float a = 1.0f + std::ldexp(1.0f, -12);
  volatile float c = -(1.0f + std::ldexp(1.0f, -11));
  BOOST_CHECK_EQUAL(__fadd_rn(__fmul_rn(a, a), c), 0.0f);
  volatile double x = 1.0 + std::ldexp(1.0, -27);
  volatile double z = -(1.0 + std::ldexp(1.0, -26));
  BOOST_CHECK_EQUAL(__dadd_rn(__dmul_rn(x, x), z), 0.0);
  BOOST_CHECK_EQUAL(min(3, 5u), 3u);
  BOOST_CHECK_EQUAL(max(std::int64_t{-4}, std::int64_t{2}), 2);
  BOOST_CHECK_EQUAL(min(std::nanf(""), 1.5f), 1.5f);
}

BOOST_AUTO_TEST_CASE(divergent_syncthreads_is_a_fault) {
  int destroyed = 0;
  struct Local {
    int* destroyed;
    ~Local() { ++*destroyed; }
  };
  const std::string message = fault_of("block_sum_kernel", dim3(5), dim3(256), [&] {
    const Local local{&destroyed};
    if (blockIdx.x == 3 && threadIdx.x >= 128) return;
    __syncthreads();
  });
  BOOST_CHECK_EQUAL(message,
                    "kernel block_sum_kernel, block (3,0,0): __syncthreads reached by 128 of 256 "
                    "threads; threads 128-255 had returned");
  BOOST_CHECK_EQUAL(destroyed, 4 * 256);  // the suspended threads were unwound
  check_engine_works();

  const std::string mixed = fault_of("mixed_kernel", dim3(1), dim3(64), [] {
    if (threadIdx.x < 40) {
      __syncthreads();
    } else {
      __syncthreads_or(1);
    }
  });
  BOOST_CHECK_EQUAL(mixed,
                    "kernel mixed_kernel, block (0,0,0): mixed barriers: threads 0-39 waiting at "
                    "__syncthreads; threads 40-63 waiting at __syncthreads_or");
  check_engine_works();
}

BOOST_AUTO_TEST_CASE(bad_shuffles_are_faults) {
  BOOST_CHECK_EQUAL(
      fault_of("partial_warp", dim3(1), dim3(48), [] { __shfl_down_sync(~0u, 1.0f, 1); }),
      "kernel partial_warp, block (0,0,0): thread 32 (32,0,0): __shfl_down_sync "
      "with mask 0xffffffff names lanes 16-31 of warp 1, which has only 16 (the "
      "block has 48 threads)");
  check_engine_works();

  BOOST_CHECK_EQUAL(fault_of("returned_lanes", dim3(2), dim3(64),
                             [] {
                               if (blockIdx.x == 1 && threadIdx.x % 32 >= 20) return;
                               __shfl_down_sync(~0u, 1.0, 4);
                             }),
                    "kernel returned_lanes, block (1,0,0): __shfl_down_sync with mask 0xffffffff "
                    "in warp 0 reached by lanes 0-19; lanes 20-31 had returned");
  check_engine_works();

  BOOST_CHECK_EQUAL(fault_of("elsewhere", dim3(1), dim3(32),
                             [] {
                               if (threadIdx.x == 7) {
                                 __syncthreads();
                               } else if (threadIdx.x < 16) {
                                 __shfl_xor_sync(~0u, 1, 1);
                               } else {
                                 __shfl_xor_sync(0xffffff00u, 1, 1);
                               }
                             }),
                    "kernel elsewhere, block (0,0,0): __shfl_xor_sync with mask 0xffffffff in "
                    "warp 0 reached by lanes 0-6, 8-15; lane 7 waiting at __syncthreads; lanes "
                    "16-31 waiting at __shfl_xor_sync with mask 0xffffff00");
  check_engine_works();

  BOOST_CHECK_EQUAL(fault_of("outside_mask", dim3(1), dim3(32),
                             [] {
                               const unsigned int mask =
                                   threadIdx.x < 16 ? 0x0000ffffu : 0xffff0000u;
                               __shfl_down_sync(mask, 1, 1);
                             }),
                    "kernel outside_mask, block (0,0,0): __shfl_down_sync with mask 0x0000ffff "
                    "in warp 0: lane 15 reads lane 16, which the mask leaves out");
  check_engine_works();

  BOOST_CHECK_EQUAL(fault_of("half_syncwarp", dim3(1), dim3(32),
                             [] {
                               if (threadIdx.x < 16) __syncwarp();
                             }),
                    "kernel half_syncwarp, block (0,0,0): __syncwarp with mask 0xffffffff in warp "
                    "0 reached by lanes 0-15; lanes 16-31 had returned");
  check_engine_works();

  BOOST_CHECK_EQUAL(fault_of("not_me", dim3(1), dim3(32), [] { __shfl_down_sync(1u, 1, 1); }),
                    "kernel not_me, block (0,0,0): thread 1 (1,0,0): __shfl_down_sync with mask "
                    "0x00000001 leaves out the calling lane 1");
  check_engine_works();
}

BOOST_AUTO_TEST_CASE(an_exception_of_a_thread_body_propagates) {
  unsigned int blocks_started = 0;
  BOOST_CHECK_EXCEPTION(run_grid("throwing", dim3(6), dim3(64),
                                 [&] {
                                   if (threadIdx.x == 0) ++blocks_started;
                                   __syncthreads();
                                   if (blockIdx.x == 2 && threadIdx.x == 5) {
                                     throw std::runtime_error("thread 5 gives up");
                                   }
                                   __syncthreads();
                                 }),
                        std::runtime_error, [](const std::runtime_error& error) {
                          return std::string(error.what()) == "thread 5 gives up";
                        });
  BOOST_CHECK_EQUAL(blocks_started, 3u);  // no block after the failing one
  check_engine_works();
}

BOOST_AUTO_TEST_CASE(builtins_outside_a_kernel_and_nested_launches_are_refused) {
  BOOST_CHECK_THROW(static_cast<void>(threadIdx.x), std::logic_error);
  BOOST_CHECK_THROW(
      run_grid("outer", dim3(1), dim3(1), [] { run_grid("inner", dim3(1), dim3(1), [] {}); }),
      std::logic_error);
  BOOST_CHECK_THROW(run_grid("too_big", dim3(1), dim3(2048), [] {}), std::invalid_argument);
  check_engine_works();
}

BOOST_AUTO_TEST_CASE(grids_run_on_any_host_thread) {
  // Each OS thread has its own engine and stack pool; the runtime runs one grid at a time.
  std::vector<int> out;
  std::exception_ptr error;
  std::thread other([&] {
    try {
      out = barrier_and_shuffle_grid();
    } catch (...) {
      error = std::current_exception();
    }
  });
  other.join();
  BOOST_REQUIRE(!error);
  check_grid_output(out);
  check_engine_works();
}

BOOST_AUTO_TEST_CASE(launch_configuration_limits) {
  using alloy::emulator::check_launch_configuration;
  const auto ok = [](dim3 grid, dim3 block, std::size_t shared = 0) {
    return check_launch_configuration(grid, block, shared) == cudaSuccess;
  };
  BOOST_CHECK(ok(dim3(1), dim3(1)));
  BOOST_CHECK(ok(dim3(0x7fffffffu, 65535, 65535), dim3(1024)));
  BOOST_CHECK(ok(dim3(1), dim3(1, 1024)));
  BOOST_CHECK(ok(dim3(1), dim3(16, 1, 64)));
  BOOST_CHECK(ok(dim3(1), dim3(8, 8, 16)));
  BOOST_CHECK(!ok(dim3(0x80000000u), dim3(1)));
  BOOST_CHECK(!ok(dim3(1, 65536), dim3(1)));
  BOOST_CHECK(!ok(dim3(1, 1, 65536), dim3(1)));
  BOOST_CHECK(!ok(dim3(1), dim3(1025)));
  BOOST_CHECK(!ok(dim3(1), dim3(1, 1025)));
  BOOST_CHECK(!ok(dim3(1), dim3(1, 1, 65)));
  BOOST_CHECK(!ok(dim3(1), dim3(32, 33)));
  BOOST_CHECK(!ok(dim3(1), dim3(64, 64, 64)));  // 2^18: the product must not wrap
  BOOST_CHECK(!ok(dim3(0), dim3(1)));
  BOOST_CHECK(!ok(dim3(1, 0), dim3(1)));
  BOOST_CHECK(!ok(dim3(1), dim3(1, 1, 0)));
  BOOST_CHECK(!ok(dim3(1), dim3(32), 16));
}

__global__ void __launch_bounds__(64) bounded_kernel(int* out) {
  out[threadIdx.x] = static_cast<int>(threadIdx.x);
}

BOOST_AUTO_TEST_CASE(launch_bounds_compile_and_run) {
  std::vector<int> out(64, -1);
  run_grid("bounded_kernel", dim3(1), dim3(64), [&] { bounded_kernel(out.data()); });
  for (int i = 0; i < 64; ++i)
    BOOST_CHECK_EQUAL(out[i], i);
}

// map_elements over 16-byte packs and the elements after the last one, or element by element:
// every output written once, with f of its own inputs.
BOOST_AUTO_TEST_CASE(map_elements_in_packs_and_singly) {
  constexpr std::int64_t kCount = 8 * 100 + 5;  // packs of 8 halves, 4 floats: a tail for both
  const std::vector<float> a = random_floats(kCount, 5);
  std::vector<__half> b(kCount);
  for (std::int64_t i = 0; i < kCount; ++i)
    b[i] = __float2half_rn(static_cast<float>(i % 77));
  alignas(16) static float out[kCount + 4];
  for (const bool packed : {true, false}) {
    std::fill(std::begin(out), std::end(out), -1.0f);
    const auto add = [](float x, __half y) { return x + __half2float(y); };
    run_grid("map", dim3(3), dim3(32),
             [&] { alloy::cuda::map_elements(add, kCount, packed, out, a.data(), b.data()); });
    for (std::int64_t i = 0; i < kCount; ++i)
      BOOST_REQUIRE_EQUAL(out[i], a[i] + static_cast<float>(i % 77));
    BOOST_CHECK_EQUAL(out[kCount], -1.0f);  // nothing past the end
  }
  static_assert(alloy::cuda::kPackSize<float, __half> == 4);
  static_assert(alloy::cuda::kPackSize<__half, std::uint8_t> == 8);
  BOOST_CHECK(alloy::cuda::packs_aligned(out, b.data()));
  BOOST_CHECK(!alloy::cuda::packs_aligned(out + 1, b.data()));
  BOOST_CHECK(!alloy::cuda::packs_aligned(out, b.data() + 1));
  const alloy::cuda::MapLaunch launch = alloy::cuda::map_launch(kCount, out + 1, a.data());
  BOOST_CHECK(!launch.packed);
  BOOST_CHECK_EQUAL(launch.grid, alloy::cuda::grid_for(kCount));
}

BOOST_AUTO_TEST_CASE(a_million_thread_grid_stride_launch) {
  constexpr std::int64_t kCount = 1 << 20;
  const unsigned int blocks = alloy::cuda::grid_for(kCount);
  const std::vector<float> x = random_floats(kCount, 4);
  std::vector<float> y(kCount);
  const auto start = std::chrono::steady_clock::now();
  run_grid("scale", dim3(blocks), dim3(alloy::cuda::kThreads), [&] {
    ALLOY_GRID_STRIDE(i, kCount) {
      y[i] = 2.0f * x[i];
    }
  });
  const auto middle = std::chrono::steady_clock::now();
  std::vector<float> sums(blocks);
  run_grid("block_sums", dim3(blocks), dim3(alloy::cuda::kThreads), [&] {
    const float sum = alloy::cuda::block_sum(x[blockIdx.x * blockDim.x + threadIdx.x]);
    if (threadIdx.x == 0) sums[blockIdx.x] = sum;
  });
  const auto end = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < kCount; ++i)
    BOOST_REQUIRE_EQUAL(y[i], 2.0f * x[i]);
  BOOST_CHECK_EQUAL(sums[blocks - 1],
                    block_sum_model(std::vector<float>(x.end() - alloy::cuda::kThreads, x.end())));
  const auto per_thread = [&](auto from, auto to) {
    return std::chrono::duration<double, std::nano>(to - from).count() /
           (static_cast<double>(blocks) * alloy::cuda::kThreads);
  };
  BOOST_TEST_MESSAGE("grid-stride launch of " << blocks * alloy::cuda::kThreads
                                              << " threads: " << per_thread(start, middle)
                                              << " ns per thread; block_sum (2 __syncthreads, "
                                                 "10 shuffles): "
                                              << per_thread(middle, end) << " ns per thread");
}

}  // namespace
