// The emulated NCCL: a communicator of one rank through its whole life, all-reduce (every
// operation, in and out of place, every dtype the project uses) and broadcast, groups, and
// collectives captured in a CUDA graph; the refusals of
// bad ranks, configs and ids; and communicators of two and three ranks, each a forked process
// as the project's ranks are: sums and averages in f32 and f16 rounded in rank order as NCCL
// rounds them, in place, through more than one staging chunk, a broadcast from a non-zero root,
// mismatched calls, and the ends that must not hang (a rank that dies, an abort from another
// thread). No test leaves a segment in /dev/shm.
#define BOOST_TEST_MODULE cuda_emulator_nccl
#include <boost/test/unit_test.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/parallel/forked.h"

namespace {

using alloy::test::check_all_succeeded;
using alloy::test::contains;
using alloy::test::expect;
using Clock = std::chrono::steady_clock;

// The /dev/shm entries of the ids this process made ("alloy-nccl-PID-..."): none may outlive
// the communicators.
std::vector<std::string> leftover_segments() {
  const std::string prefix = "alloy-nccl-" + std::to_string(::getpid()) + "-";
  std::vector<std::string> found;
  DIR* directory = ::opendir("/dev/shm");
  BOOST_REQUIRE(directory != nullptr);
  while (const dirent* entry = ::readdir(directory)) {
    if (std::string(entry->d_name).rfind(prefix, 0) == 0) found.emplace_back(entry->d_name);
  }
  ::closedir(directory);
  return found;
}

class DeviceMemory {
 public:
  explicit DeviceMemory(std::size_t bytes) {
    BOOST_REQUIRE_EQUAL(cudaMalloc(&data_, bytes), cudaSuccess);
  }
  ~DeviceMemory() { static_cast<void>(cudaFree(data_)); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A communicator of one rank, made as the project makes it (a config, then polling).
struct OneRank {
  OneRank() {
    ncclUniqueId id;
    BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
    BOOST_REQUIRE(started == ncclSuccess || started == ncclInProgress);
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress)
      BOOST_REQUIRE_EQUAL(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    BOOST_REQUIRE_EQUAL(state, ncclSuccess);
  }
  ~OneRank() {
    BOOST_CHECK_EQUAL(ncclCommFinalize(comm), ncclSuccess);
    BOOST_CHECK_EQUAL(ncclCommDestroy(comm), ncclSuccess);
  }
  OneRank(const OneRank&) = delete;
  OneRank& operator=(const OneRank&) = delete;
  ncclComm_t comm = nullptr;
};

std::vector<unsigned char> pattern(std::size_t bytes, unsigned seed) {
  std::vector<unsigned char> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    out[i] = static_cast<unsigned char>(i * 37 + seed);
  return out;
}

std::vector<unsigned char> read(const DeviceMemory& memory, std::size_t bytes) {
  std::vector<unsigned char> out(bytes);
  BOOST_REQUIRE_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaMemcpy(out.data(), memory.get(), bytes, cudaMemcpyDeviceToHost),
                      cudaSuccess);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(all_reduce_and_broadcast_of_one_rank_return_every_bit) {
  const OneRank rank;
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamCreate(&stream), cudaSuccess);
  const std::size_t count = 1000;
  for (const auto& [type, size] : {std::pair<ncclDataType_t, std::size_t>{ncclFloat32, 4},
                                   {ncclFloat16, 2},
                                   {ncclBfloat16, 2},
                                   {ncclUint8, 1}}) {
    for (const ncclRedOp_t op : {ncclSum, ncclAvg, ncclMax, ncclMin}) {
      const auto values = pattern(count * size, static_cast<unsigned>(op * 13 + type));
      const DeviceMemory send(count * size), receive(count * size);
      BOOST_REQUIRE_EQUAL(
          cudaMemcpy(send.get(), values.data(), values.size(), cudaMemcpyHostToDevice),
          cudaSuccess);
      BOOST_REQUIRE_EQUAL(
          ncclAllReduce(send.get(), receive.get(), count, type, op, rank.comm, stream),
          ncclSuccess);
      BOOST_TEST(read(receive, values.size()) == values, "out of place, type " << type);
      BOOST_REQUIRE_EQUAL(ncclAllReduce(send.get(), send.get(), count, type, op, rank.comm, stream),
                          ncclSuccess);
      BOOST_TEST(read(send, values.size()) == values, "in place, type " << type);
    }
  }
  const auto bytes = pattern(333, 5);
  const DeviceMemory buffer(bytes.size()), other(bytes.size());
  BOOST_REQUIRE_EQUAL(cudaMemcpy(buffer.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
                      cudaSuccess);
  BOOST_REQUIRE_EQUAL(
      ncclBroadcast(buffer.get(), buffer.get(), bytes.size(), ncclUint8, 0, rank.comm, stream),
      ncclSuccess);
  BOOST_REQUIRE_EQUAL(
      ncclBroadcast(buffer.get(), other.get(), bytes.size(), ncclUint8, 0, rank.comm, stream),
      ncclSuccess);
  BOOST_TEST(read(buffer, bytes.size()) == bytes);
  BOOST_TEST(read(other, bytes.size()) == bytes);
  BOOST_TEST(ncclBroadcast(buffer.get(), other.get(), 1, ncclUint8, 1, rank.comm, stream) ==
             ncclInvalidArgument);
  BOOST_TEST(ncclAllReduce(buffer.get(), other.get(), 1, static_cast<ncclDataType_t>(99), ncclSum,
                           rank.comm, stream) == ncclInvalidArgument);
  BOOST_REQUIRE_EQUAL(cudaStreamDestroy(stream), cudaSuccess);
}

// A group's collectives run in call order; a collective issued to a capturing stream is a node
// of the graph, run at every launch (not at the capture), with the buffers of that moment.
BOOST_AUTO_TEST_CASE(groups_nest_and_captured_collectives_run_at_each_graph_launch) {
  const OneRank rank;
  cudaStream_t stream = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::size_t bytes = 256;
  const DeviceMemory a(bytes), b(bytes), c(bytes);
  const auto first = pattern(bytes, 1);
  BOOST_REQUIRE_EQUAL(cudaMemcpy(a.get(), first.data(), bytes, cudaMemcpyHostToDevice),
                      cudaSuccess);
  // a -> b, then b -> c, in one group: c sees what the first wrote.
  BOOST_REQUIRE_EQUAL(ncclGroupStart(), ncclSuccess);
  BOOST_REQUIRE_EQUAL(ncclGroupStart(), ncclSuccess);
  BOOST_REQUIRE_EQUAL(ncclBroadcast(a.get(), b.get(), bytes, ncclUint8, 0, rank.comm, stream),
                      ncclSuccess);
  BOOST_REQUIRE_EQUAL(ncclGroupEnd(), ncclSuccess);
  BOOST_REQUIRE_EQUAL(ncclBroadcast(b.get(), c.get(), bytes, ncclUint8, 0, rank.comm, stream),
                      ncclSuccess);
  BOOST_REQUIRE_EQUAL(ncclGroupEnd(), ncclSuccess);
  BOOST_TEST(read(c, bytes) == first);
  BOOST_TEST(ncclGroupEnd() == ncclInvalidUsage);

  cudaGraph_t graph = nullptr;
  BOOST_REQUIRE_EQUAL(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                      cudaSuccess);
  BOOST_REQUIRE_EQUAL(
      ncclAllReduce(a.get(), b.get(), bytes / 4, ncclFloat32, ncclSum, rank.comm, stream),
      ncclSuccess);
  BOOST_REQUIRE_EQUAL(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  std::size_t nodes = 0;
  BOOST_REQUIRE_EQUAL(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  BOOST_TEST(nodes == 1u);
  cudaGraphExec_t exec = nullptr;
  BOOST_REQUIRE_EQUAL(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (const unsigned seed : {2u, 3u}) {
    const auto values = pattern(bytes, seed);
    BOOST_REQUIRE_EQUAL(cudaMemcpy(a.get(), values.data(), bytes, cudaMemcpyHostToDevice),
                        cudaSuccess);
    BOOST_REQUIRE_EQUAL(cudaGraphLaunch(exec, stream), cudaSuccess);
    BOOST_TEST(read(b, bytes) == values, "launch with pattern " << seed);
  }
  BOOST_REQUIRE_EQUAL(cudaGraphExecDestroy(exec), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaGraphDestroy(graph), cudaSuccess);
  BOOST_REQUIRE_EQUAL(cudaStreamDestroy(stream), cudaSuccess);
}

BOOST_AUTO_TEST_CASE(bad_ranks_configs_and_ids_are_refused_as_nccl_refuses_them) {
  ncclUniqueId id;
  BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm = nullptr;
  BOOST_TEST(ncclCommInitRankConfig(&comm, 1, id, 1, &config) == ncclInvalidArgument);
  BOOST_TEST(std::string(ncclGetLastError(comm)) ==
             "ncclCommInitRankConfig: rank 1 of 1 ranks is invalid");
  BOOST_TEST(ncclCommInitRankConfig(&comm, 0, id, 0, &config) == ncclInvalidArgument);
  BOOST_TEST(ncclCommInitRankConfig(&comm, 2, id, -1, &config) == ncclInvalidArgument);
  ncclConfig_t uninitialised{};
  BOOST_TEST(ncclCommInitRankConfig(&comm, 1, id, 0, &uninitialised) == ncclInvalidArgument);
  ncclUniqueId foreign{};
  std::strcpy(foreign.internal, "not an id");
  BOOST_TEST(ncclCommInitRank(&comm, 1, foreign, 0) == ncclInvalidArgument);
  BOOST_TEST(contains(ncclGetLastError(comm), "not made by ncclGetUniqueId"));
  BOOST_TEST(comm == nullptr);
  BOOST_TEST(std::string(ncclGetErrorString(ncclInvalidUsage)) ==
             "invalid usage (run with NCCL_DEBUG=WARN for details)");
  BOOST_TEST(ncclCommAbort(nullptr) == ncclSuccess);
  BOOST_TEST(leftover_segments().empty());
}

BOOST_AUTO_TEST_CASE(two_ranks_of_one_process_are_refused_instead_of_deadlocking) {
  ncclUniqueId id;
  BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comms[2] = {nullptr, nullptr};
  for (int rank = 0; rank < 2; ++rank)
    BOOST_REQUIRE_EQUAL(ncclCommInitRankConfig(&comms[rank], 2, id, rank, &config), ncclInProgress);
  for (ncclComm_t comm : comms) {
    ncclResult_t state = ncclInProgress;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (state == ncclInProgress && Clock::now() < deadline)
      BOOST_REQUIRE_EQUAL(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    BOOST_TEST(state == ncclInvalidUsage);
  }
  BOOST_TEST(contains(ncclGetLastError(nullptr), "needs a process per rank"));
  BOOST_TEST(ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum, comms[0], nullptr) ==
             ncclInvalidUsage);
  for (ncclComm_t comm : comms)
    BOOST_TEST(ncclCommAbort(comm) == ncclSuccess);
  BOOST_TEST(leftover_segments().empty());
}

BOOST_AUTO_TEST_CASE(a_finalized_communicator_refuses_collectives_and_abort_frees_it) {
  ncclUniqueId id;
  BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  BOOST_REQUIRE_EQUAL(ncclCommInitRankConfig(&comm, 1, id, 0, nullptr), ncclSuccess);
  const DeviceMemory buffer(16);
  BOOST_REQUIRE_EQUAL(ncclCommFinalize(comm), ncclSuccess);
  BOOST_TEST(ncclAllReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclSum, comm, nullptr) ==
             ncclInvalidUsage);
  BOOST_TEST(std::string(ncclGetLastError(comm)).find("finalized") != std::string::npos);
  BOOST_TEST(ncclCommAbort(comm) == ncclSuccess);
}

// --- several ranks, one forked process each ---

namespace {

// Runs body(rank, id) in `nranks` child processes sharing one fresh id; checks that each
// returned (a child fails by throwing, see tests/parallel/forked.h) and left no segment.
void run_ranks(int nranks, const std::function<void(int, const ncclUniqueId&)>& body) {
  ncclUniqueId id;
  BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
  check_all_succeeded(alloy::test::run_ranks(nranks, [&](int rank) { body(rank, id); }));
  BOOST_TEST(leftover_segments().empty());
}

// A communicator made as the project makes it (non-blocking, polled with a deadline) or with
// the blocking ncclCommInitRank.
ncclComm_t join(int nranks, const ncclUniqueId& id, int rank, bool blocking = false) {
  ncclComm_t comm = nullptr;
  if (blocking) {
    const ncclResult_t result = ncclCommInitRank(&comm, nranks, id, rank);
    expect(result == ncclSuccess, std::string("ncclCommInitRank: ") + ncclGetLastError(comm));
    return comm;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  expect(started == ncclInProgress, "ncclCommInitRankConfig returned " + std::to_string(started));
  ncclResult_t state = ncclInProgress;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (state == ncclInProgress && Clock::now() < deadline) {
    expect(ncclCommGetAsyncError(comm, &state) == ncclSuccess, "ncclCommGetAsyncError failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  expect(state == ncclSuccess, std::string("init: ") + ncclGetLastError(comm));
  return comm;
}

void finish(ncclComm_t comm) {
  expect(ncclCommFinalize(comm) == ncclSuccess, "ncclCommFinalize failed");
  expect(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy failed");
}

// Device memory in a child, where Boost's assertions cannot report: failures throw.
class Buffer {
 public:
  explicit Buffer(std::size_t bytes) : bytes_(bytes) {
    expect(cudaMalloc(&data_, bytes) == cudaSuccess, "cudaMalloc failed");
  }
  template <typename T>
  explicit Buffer(const std::vector<T>& values) : Buffer(values.size() * sizeof(T)) {
    expect(cudaMemcpy(data_, values.data(), bytes_, cudaMemcpyHostToDevice) == cudaSuccess,
           "upload failed");
  }
  ~Buffer() { static_cast<void>(cudaFree(data_)); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return data_; }
  template <typename T>
  std::vector<T> read() const {
    std::vector<T> out(bytes_ / sizeof(T));
    expect(cudaDeviceSynchronize() == cudaSuccess, "cudaDeviceSynchronize failed");
    expect(cudaMemcpy(out.data(), data_, bytes_, cudaMemcpyDeviceToHost) == cudaSuccess,
           "download failed");
    return out;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

// Rank `rank`'s input `i`: floats of every magnitude from 2^-20 to 2^27 (so that sums round),
// except elements 0 and 1, chosen so that rounding in rank order shows in f32 and in f16.
float input(int rank, std::size_t i) {
  if (i < 2) return rank != 0 ? 1.0f : i == 0 ? 16777216.0f : 2048.0f;  // 2^24 + 1 + 1, 2^11 + ...
  std::uint32_t h =
      static_cast<std::uint32_t>(i) * 2654435761u + static_cast<std::uint32_t>(rank) * 40503u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  const float magnitude =
      std::ldexp(static_cast<float>(h & 0xffffffu), static_cast<int>(h >> 27) - 44);
  return (h & 0x4000000u) != 0 ? -magnitude : magnitude;
}

// Rounding steps kept apart (no FMA contraction): a volatile store rounds to float.
float rounded(float value) {
  const volatile float stored = value;
  return stored;
}
float to_half(float value) {
  return __half2float(__float2half_rn(value));
}

// What NCCL computes for ranks 0..nranks-1 in order: sum, or average as 1/nranks (rounded to the
// type) times each input, rounded, then summed; every step rounded to the type.
std::vector<float> expected_reduction(int nranks, std::size_t count, bool half, bool average) {
  const auto round = [half](float value) { return half ? to_half(value) : rounded(value); };
  const float scale =
      half ? __half2float(__double2half(1.0 / nranks)) : static_cast<float>(1.0 / nranks);
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    float sum = 0.0f;
    for (int rank = 0; rank < nranks; ++rank) {
      float value = half ? to_half(input(rank, i)) : input(rank, i);
      if (average) value = round(value * scale);
      sum = rank == 0 ? value : round(sum + value);
    }
    out[i] = sum;
  }
  return out;
}

std::string first_difference(const std::vector<float>& got, const std::vector<float>& expected) {
  if (got.size() != expected.size()) return "sizes differ";
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &expected[i], sizeof(float)) != 0) {
      return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " instead of " +
             std::to_string(expected[i]);
    }
  }
  return {};
}

// All-reduces `count` elements of f32 or f16 (sum or average), out of place then in place, and
// checks every element against expected_reduction.
void all_reduce_and_check(ncclComm_t comm, int nranks, int rank, std::size_t count, bool half,
                          bool average) {
  const std::vector<float> expected = expected_reduction(nranks, count, half, average);
  const ncclRedOp_t op = average ? ncclAvg : ncclSum;
  const std::string what = std::string(half ? "f16 " : "f32 ") + (average ? "avg" : "sum") +
                           " of " + std::to_string(count) + " on rank " + std::to_string(rank);
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i)
    values[i] = input(rank, i);
  if (half) {
    std::vector<__half> halves(count);
    for (std::size_t i = 0; i < count; ++i)
      halves[i] = __float2half_rn(values[i]);
    const Buffer send(halves), receive(count * sizeof(__half));
    for (void* out : {receive.get(), send.get()}) {
      expect(ncclAllReduce(send.get(), out, count, ncclFloat16, op, comm, nullptr) == ncclSuccess,
             what + ": ncclAllReduce failed");
      const std::vector<__half> got = (out == send.get() ? send : receive).read<__half>();
      std::vector<float> widened(count);
      for (std::size_t i = 0; i < count; ++i)
        widened[i] = __half2float(got[i]);
      const std::string difference = first_difference(widened, expected);
      expect(difference.empty(), what + (out == send.get() ? " in place: " : ": ") + difference);
    }
  } else {
    const Buffer send(values), receive(count * sizeof(float));
    for (void* out : {receive.get(), send.get()}) {
      expect(ncclAllReduce(send.get(), out, count, ncclFloat32, op, comm, nullptr) == ncclSuccess,
             what + ": ncclAllReduce failed");
      const std::string difference =
          first_difference((out == send.get() ? send : receive).read<float>(), expected);
      expect(difference.empty(), what + (out == send.get() ? " in place: " : ": ") + difference);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_reference_rounds_in_rank_order_as_nccl_does) {
  // 2^24 + 1 + 1 in f32 and 2^11 + 1 + 1 in f16: each step ties back to even, where the sum of
  // all three would be exact.
  BOOST_TEST(expected_reduction(3, 1, false, false)[0] == 16777216.0f);
  BOOST_TEST(expected_reduction(2, 2, true, false)[1] == 2048.0f);
  BOOST_TEST(expected_reduction(3, 2, true, false)[1] == 2048.0f);
  BOOST_TEST(expected_reduction(3, 2, false, false)[1] == 2050.0f);
  // Averages of three multiply each input by 1/3 rounded to the type, round, then sum:
  // (2^24 + 2) / 3 = 5592406 exactly, but f32 gives 5592405.5 + 1/3 -> 5592406 -> 5592406.5,
  // and (2^11 + 2) / 3 in f16 gives 682.5 -> 683 -> 683.5.
  BOOST_TEST(expected_reduction(3, 1, false, true)[0] == 5592406.5f);
  BOOST_TEST(expected_reduction(3, 2, true, true)[1] == 683.5f);
}

BOOST_AUTO_TEST_CASE(two_and_three_ranks_sum_and_average_f32_and_f16_in_rank_order) {
  for (const int nranks : {2, 3}) {
    BOOST_TEST_CONTEXT(nranks << " ranks") {
      run_ranks(nranks, [nranks](int rank, const ncclUniqueId& id) {
        const ncclComm_t comm = join(nranks, id, rank, /*blocking=*/nranks == 3);
        for (const bool half : {false, true}) {
          for (const bool average : {false, true})
            all_reduce_and_check(comm, nranks, rank, 1000, half, average);
        }
        finish(comm);
      });
    }
  }
}

BOOST_AUTO_TEST_CASE(products_extremes_integers_and_bf16_reduce_across_three_ranks) {
  run_ranks(3, [](int rank, const ncclUniqueId& id) {
    const ncclComm_t comm = join(3, id, rank);
    // int32 rank r holds r - 1, 2^30 + r, -7r; sums and products wrap, and an average divides
    // the wrapped sum (truncating), as NCCL's integer reductions do.
    const std::vector<std::int32_t> values = {rank - 1, (1 << 30) + rank, -7 * rank};
    const std::vector<std::pair<ncclRedOp_t, std::vector<std::int32_t>>> cases = {
        {ncclMax, {1, (1 << 30) + 2, 0}},
        {ncclMin, {-1, 1 << 30, -14}},
        {ncclProd, {0, static_cast<std::int32_t>(0x80000000u), 0}},
        {ncclSum, {0, static_cast<std::int32_t>(0xc0000003u), -21}},
        {ncclAvg, {0, -357913940, -7}}};
    for (const auto& [op, expected] : cases) {
      const Buffer buffer(values);
      expect(ncclAllReduce(buffer.get(), buffer.get(), values.size(), ncclInt32, op, comm,
                           nullptr) == ncclSuccess,
             "ncclAllReduce failed");
      expect(buffer.read<std::int32_t>() == expected,
             "int32 operation " + std::to_string(op) + " on rank " + std::to_string(rank));
    }
    // bf16 (8 significant bits): 256 + 1 + 1 ties back to 256 twice, in rank order.
    const Buffer bf16(std::vector<__nv_bfloat16>{__float2bfloat16_rn(rank == 0 ? 256.0f : 1.0f)});
    expect(ncclAllReduce(bf16.get(), bf16.get(), 1, ncclBfloat16, ncclSum, comm, nullptr) ==
               ncclSuccess,
           "ncclAllReduce of bf16 failed");
    expect(__bfloat162float(bf16.read<__nv_bfloat16>()[0]) == 256.0f, "bf16 sum");
    finish(comm);
  });
}

BOOST_AUTO_TEST_CASE(a_buffer_larger_than_the_staging_area_goes_through_in_chunks) {
  // 700000 floats are 2.8 MB: three chunks of the 1 MiB staging area, the last one partial.
  run_ranks(3, [](int rank, const ncclUniqueId& id) {
    const ncclComm_t comm = join(3, id, rank);
    all_reduce_and_check(comm, 3, rank, 700000, false, false);
    finish(comm);
  });
}

BOOST_AUTO_TEST_CASE(broadcast_from_a_non_zero_root_reaches_every_rank) {
  run_ranks(3, [](int rank, const ncclUniqueId& id) {
    const ncclComm_t comm = join(3, id, rank);
    // 1.5 MiB of bytes: two chunks. The root broadcasts in place; the others receive out of
    // place and pass no send buffer, which NCCL never reads on them.
    const std::size_t count = 3 << 19;
    std::vector<std::uint8_t> expected(count);
    for (std::size_t i = 0; i < count; ++i)
      expected[i] = static_cast<std::uint8_t>(i * 131 + i / 7);
    const Buffer buffer(rank == 2 ? expected : std::vector<std::uint8_t>(count, 0));
    expect(ncclBroadcast(rank == 2 ? buffer.get() : nullptr, buffer.get(), count, ncclUint8, 2,
                         comm, nullptr) == ncclSuccess,
           "ncclBroadcast failed");
    expect(buffer.read<std::uint8_t>() == expected,
           "rank " + std::to_string(rank) + " received other bytes");
    expect(ncclBroadcast(buffer.get(), buffer.get(), 1, ncclUint8, 3, comm, nullptr) ==
               ncclInvalidArgument,
           "root 3 of 3 ranks was accepted");
    finish(comm);
  });
}

BOOST_AUTO_TEST_CASE(reduce_writes_the_sum_at_its_root_only) {
  run_ranks(3, [](int rank, const ncclUniqueId& id) {
    const ncclComm_t comm = join(3, id, rank);
    const float mine = static_cast<float>(rank + 1);
    const Buffer buffer(std::vector<float>{mine, 2 * mine, -mine});
    expect(ncclReduce(buffer.get(), buffer.get(), 3, ncclFloat32, ncclSum, 1, comm, nullptr) ==
               ncclSuccess,
           "ncclReduce failed");
    const std::vector<float> want =
        rank == 1 ? std::vector<float>{6, 12, -6} : std::vector<float>{mine, 2 * mine, -mine};
    expect(buffer.read<float>() == want, "rank " + std::to_string(rank) + " holds other values");
    expect(ncclReduce(buffer.get(), buffer.get(), 1, ncclFloat32, ncclSum, 3, comm, nullptr) ==
               ncclInvalidArgument,
           "root 3 of 3 ranks was accepted");
    finish(comm);
  });
}

BOOST_AUTO_TEST_CASE(mismatched_collectives_fail_on_every_rank_naming_both) {
  run_ranks(2, [](int rank, const ncclUniqueId& id) {
    const ncclComm_t comm = join(2, id, rank);
    const Buffer buffer(std::vector<float>(12, 1.0f));
    expect(ncclAllReduce(buffer.get(), buffer.get(), rank == 0 ? 10 : 12, ncclFloat32, ncclSum,
                         comm, nullptr) == ncclSuccess,
           "ncclAllReduce failed to queue");
    expect(cudaDeviceSynchronize() == cudaSuccess, "the device failed");
    ncclResult_t state = ncclSuccess;
    expect(ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclInvalidUsage,
           "the mismatch left the state " + std::to_string(state));
    const std::string error = ncclGetLastError(comm);
    expect(contains(error,
                    "rank 0 called ncclAllReduce (ncclSum) of 10 x ncclFloat32, rank 1 "
                    "ncclAllReduce (ncclSum) of 12 x ncclFloat32"),
           "the error says: " + error);
    expect(buffer.read<float>() == std::vector<float>(12, 1.0f), "the buffer was changed");
    expect(ncclCommAbort(comm) == ncclSuccess, "ncclCommAbort failed");
  });
}

BOOST_AUTO_TEST_CASE(a_rank_that_dies_fails_the_others_collective_within_seconds) {
  ncclUniqueId id;
  BOOST_REQUIRE_EQUAL(ncclGetUniqueId(&id), ncclSuccess);
  const auto outcomes = alloy::test::run_ranks(2, [&](int rank) {
    const ncclComm_t comm = join(2, id, rank);
    if (rank == 1) _exit(3);  // gone without a word: no destroy, no abort
    const Buffer buffer(std::vector<float>(4, 1.0f));
    const auto start = Clock::now();
    expect(ncclAllReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclSum, comm, nullptr) ==
               ncclSuccess,
           "ncclAllReduce failed to queue");
    expect(cudaDeviceSynchronize() == cudaSuccess, "the device failed");
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    ncclResult_t state = ncclSuccess;
    expect(ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclRemoteError,
           "the state is " + std::to_string(state));
    const std::string error = ncclGetLastError(comm);
    expect(contains(error, "rank 1 (pid ") && contains(error, ") exited while rank 0 waited"),
           "the error says: " + error);
    expect(seconds < 5.0, "noticed after " + std::to_string(seconds) + " s");
    expect(ncclCommAbort(comm) == ncclSuccess, "ncclCommAbort failed");
  });
  BOOST_TEST(outcomes[0].exit_code == 0, outcomes[0].error);
  BOOST_TEST(outcomes[1].exit_code == 3);
  BOOST_TEST(leftover_segments().empty());
}

BOOST_AUTO_TEST_CASE(an_abort_from_another_thread_ends_a_wait_and_the_peer_learns_of_it) {
  run_ranks(2, [](int rank, const ncclUniqueId& id) {
    const ncclComm_t comm = join(2, id, rank);
    const Buffer buffer(std::vector<float>(4, 1.0f));
    const auto start = Clock::now();
    if (rank == 1) {
      // Comes late, after rank 0 gave up: finds rank 0 gone instead of waiting for it.
      std::this_thread::sleep_for(std::chrono::seconds(1));
      expect(ncclAllReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclSum, comm, nullptr) ==
                 ncclSuccess,
             "ncclAllReduce failed to queue");
      expect(cudaDeviceSynchronize() == cudaSuccess, "the device failed");
      ncclResult_t state = ncclSuccess;
      expect(ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclRemoteError,
             "rank 1's state is " + std::to_string(state));
      const std::string error = ncclGetLastError(comm);
      expect(contains(error, "rank 0 (pid ") && contains(error, "left the communicator"),
             "rank 1's error says: " + error);
      expect(ncclCommAbort(comm) == ncclSuccess, "ncclCommAbort failed");
      return;
    }
    // Rank 0 waits in the collective (this thread holds the stream) until the watchdog-like
    // thread aborts the communicator.
    expect(ncclAllReduce(buffer.get(), buffer.get(), 4, ncclFloat32, ncclSum, comm, nullptr) ==
               ncclSuccess,
           "ncclAllReduce failed to queue");
    std::thread watchdog([comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      static_cast<void>(ncclCommAbort(comm));
    });
    const cudaError_t synchronized = cudaDeviceSynchronize();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    watchdog.join();
    expect(synchronized == cudaSuccess, "the device failed");
    expect(seconds >= 0.25 && seconds < 0.9,
           "the wait ended after " + std::to_string(seconds) + " s");
    expect(buffer.read<float>() == std::vector<float>(4, 1.0f), "the aborted reduction wrote");
  });
}
